"""`python -m runfold`: the same as the `runfold` command."""

from runfold.cli.main import main

if __name__ == "__main__":
    main()
