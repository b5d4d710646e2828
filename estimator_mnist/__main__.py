import sys

from estimator_mnist.cli import main

sys.exit(main())
