"""`python -m clearsight` is the same as the `clearsight` command."""

from clearsight.cli import main

if __name__ == "__main__":
    main()
