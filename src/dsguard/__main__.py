import sys

from dsguard.cli import main

sys.exit(main())
