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
// A "no cost change" body (its second line is NO_CHANGE_TAG, from trainfleet diff --format markdown) replaces
// the stack's earlier comment, so no stale numbers stay up, but is not posted as a new one: { action: 'none' }.
//
// markStale is the rule for the stacks the pull request no longer changes (they drop out of the workflow's
// matrix; the `stale-comments` job calls it with the matrix's stacks): each of the bot's cost comments whose
// stack is not in the list becomes a short stale body (its marker, STALE_TAG, its old headline struck
// through), unless it already is one. cli/preview/github_comment.py (stale_updates) is the same rule, both
// tested on the `stale_cases` of tests/fixtures/cost_comment_cases.json.
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
// Second lines: a body saying the stack's cost did not change; a comment whose stack the PR no longer changes.
const NO_CHANGE_TAG = '<!-- trainfleet-no-cost-change -->';
const STALE_TAG = '<!-- trainfleet-stale -->';

function markerFor(stack) {
  return `${MARKER_PREFIX}${stack} -->`;
}

// GitHub keeps the CRLF line ends of a comment edited in a browser.
function firstLine(body) {
  return (body || '').split('\n', 1)[0].replace(/\r$/, '');
}

function secondLine(body) {
  const lines = (body || '').split('\n');
  return lines.length > 1 ? lines[1].replace(/\r$/, '') : '';
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

// The first line of a comment's text after its marker and hidden tags, without heading marks or `~`.
function headline(body) {
  for (const raw of (body || '').split('\n').slice(1)) {
    const line = raw.replace(/\r$/, '').trim();
    if (line && !line.startsWith('<!--')) return line.replace(/^#+/, '').replace(/~/g, '').trim();
  }
  return '';
}

function staleBody(stack, oldBody, headSha = '') {
  const lines = [markerFor(stack), STALE_TAG, `### \`${stack}\` · no longer changed by this PR`, ''];
  const was = headline(oldBody);
  if (was) lines.push(`~~${was}~~`, '');
  const sha = headSha ? ` (as of \`${headSha.slice(0, 7)}\`)` : '';
  lines.push(`This pull request no longer changes this stack${sha}: the cost diff that was here is out of date.`);
  return `${lines.join('\n')}\n`;
}

// [{ comment_id, body }] for the bot's cost comments of stacks not in `stacks`, not stale already.
function staleUpdates(comments, stacks, headSha = '', botLogin = BOT_LOGIN) {
  const keep = new Set(stacks);
  const out = [];
  for (const c of comments) {
    if (!(c.user && c.user.login === botLogin)) continue;
    const line = firstLine(c.body);
    if (!(line.startsWith(MARKER_PREFIX) && line.endsWith(' -->'))) continue;
    const stack = line.slice(MARKER_PREFIX.length, -' -->'.length);
    if (keep.has(stack) || secondLine(c.body) === STALE_TAG) continue;
    out.push({ comment_id: c.id, body: staleBody(stack, c.body, headSha) });
  }
  return out;
}

async function markStale({ github, context, core }, { stacks, headSha = '', botLogin = BOT_LOGIN } = {}) {
  if (!Array.isArray(stacks)) {
    throw new Error('cost-comment: markStale needs the list of stacks the PR changes (the workflow passes STACKS)');
  }
  const { owner, repo } = context.repo;
  const issue_number = context.payload.pull_request.number;
  try {
    const comments = await github.paginate(github.rest.issues.listComments, {
      owner, repo, issue_number, per_page: 100,
    });
    const updates = staleUpdates(comments, stacks, headSha, botLogin);
    for (const { comment_id, body } of updates) {
      await github.rest.issues.updateComment({ owner, repo, comment_id, body });
      core.info(`marked comment ${comment_id} stale: its stack is no longer changed by this pull request`);
    }
    return { action: 'stale', comment_ids: updates.map((u) => u.comment_id) };
  } catch (error) {
    if (!isReadOnlyToken(error)) throw error;
    core.warning(`cost-comment: this run's GITHUB_TOKEN cannot write comments (${error.status}); stale comments left as they are`);
    return { action: 'skipped', comment_ids: [] };
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
  if (!ours && secondLine(body) === NO_CHANGE_TAG) {
    // nothing to correct: a "no cost change" comment on a stack that never had one is noise
    core.info(`no cost change for ${stack} and no earlier comment to replace: nothing posted`);
    return { action: 'none', comment_id: null };
  }
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
module.exports.markStale = markStale;
module.exports.staleBody = staleBody;
module.exports.staleUpdates = staleUpdates;
