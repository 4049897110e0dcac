"""`python -m populora.core.stagehost serve --socket PATH` (also `python -m populora stage-host serve ...`)."""

from populora.core.stagehost.host import main

if __name__ == "__main__":
    raise SystemExit(main())
