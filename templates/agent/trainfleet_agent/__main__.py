import sys

from trainfleet_agent.cli import main

sys.exit(main())
