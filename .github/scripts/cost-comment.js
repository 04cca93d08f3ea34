// Post or update this stack's cost-diff comment on a pull request, found again by its hidden marker.
//
// Called by .github/workflows/cost-diff.yml through actions/github-script, which gives a script `github`
// (an Octokit with the REST methods and paginate), `context` and `core`
// (https://github.com/actions/github-script#run-a-separate-file):
//
//   const run = require('./.github/scripts/cost-comment.js');
//   return await run({ github, context, core }, { stack: process.env.STACK, bodyFile: 'comment.md' });
//
// The rule is the one of cli/preview/github_comment.py, and both are tested on the same table of cases
// (tests/fixtures/cost_comment_cases.json): a comment is this stack's when the bot posted it and its first
// line is exactly the stack's marker, so `dev` never takes `dev-eu`'s comment, nor a human's that quotes it.
//
// A read-only GITHUB_TOKEN cannot comment: GitHub answers 403 "Resource not accessible by integration".
// The workflow does not call this on a fork's pull request (always read-only), but a same-repository one
// can have it too (Dependabot's). Then the step leaves a warning and returns { action: 'skipped' } instead
// of failing: the workflow has already written the markdown to the job summary. Any other error fails it.
'use strict';

const fs = require('fs');

const MARKER_PREFIX = '<!-- trainfleet-cost-diff:';
// The login of the workflow's GITHUB_TOKEN, which actions/github-script posts as.
const BOT_LOGIN = 'github-actions[bot]';

function markerFor(stack) {
  return `${MARKER_PREFIX}${stack} -->`;
}

// GitHub keeps the CRLF line ends of a comment edited in a browser.
function firstLine(body) {
  return (body || '').split('\n', 1)[0].replace(/\r$/, '');
}

function isOurs(comment, marker, botLogin = BOT_LOGIN) {
  const author = comment.user && comment.user.login;
  return author === botLogin && firstLine(comment.body) === marker;
}

// Octokit's RequestError carries the HTTP status and GitHub's message
// (https://github.com/octokit/request-error.js); a rate limit is a 403 too, and must still fail the step.
function isReadOnlyToken(error) {
  return Boolean(error) && error.status === 403 && /Resource not accessible by integration/i.test(String(error.message));
}

async function run({ github, context, core }, options = {}) {
  try {
    return await upsert({ github, context, core }, options);
  } catch (error) {
    if (!isReadOnlyToken(error)) throw error;
    core.warning(
      `cost-comment: this run's GITHUB_TOKEN cannot write comments (${error.status}: read-only, as on a pull request ` +
        `from a fork or from Dependabot); the ${options.stack} cost diff is in the job summary only`,
    );
    return { action: 'skipped', comment_id: null };
  }
}

async function upsert({ github, context, core }, { stack, bodyFile = 'comment.md', botLogin = BOT_LOGIN } = {}) {
  if (!stack) {
    throw new Error('cost-comment: no stack given (the workflow passes process.env.STACK)');
  }
  const marker = markerFor(stack);
  const body = fs.readFileSync(bodyFile, 'utf8');
  if (firstLine(body) !== marker) {
    // a body without its marker first would never be found again: one new comment per push
    throw new Error(`${bodyFile} does not start with ${marker}; render it with trainfleet diff --format markdown`);
  }
  const { owner, repo } = context.repo;
  const issue_number = context.payload.pull_request.number;
  // Every page (paginate follows the Link header), in the API's order: ascending id, so the oldest of ours wins.
  const comments = await github.paginate(github.rest.issues.listComments, {
    owner, repo, issue_number, per_page: 100,
  });
  const ours = comments.find((c) => isOurs(c, marker, botLogin));
  if (!ours) {
    const { data } = await github.rest.issues.createComment({ owner, repo, issue_number, body });
    core.info(`created the ${stack} cost comment ${data.id}`);
    return { action: 'create', comment_id: data.id };
  }
  if (ours.body === body) {
    core.info(`comment ${ours.id} is already up to date`);
    return { action: 'unchanged', comment_id: ours.id };
  }
  await github.rest.issues.updateComment({ owner, repo, comment_id: ours.id, body });
  core.info(`updated comment ${ours.id}`);
  return { action: 'update', comment_id: ours.id };
}

module.exports = run;
module.exports.markerFor = markerFor;
module.exports.isOurs = isOurs;
module.exports.isReadOnlyToken = isReadOnlyToken;
