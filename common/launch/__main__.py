"""python -m common.launch --nproc N -- CMD: N local ranks of CMD (`common.launch.local`)."""

from common.launch.local import main

raise SystemExit(main())
