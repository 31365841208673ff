"""python -m common.data fetch|summary: MNIST into its folder, verified (`common.data.fetch`)."""

from common.data.fetch import main

raise SystemExit(main())
