import sys

from dsguard.cli.main import main

sys.exit(main())
