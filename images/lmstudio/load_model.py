"""Load one GGUF into LM Studio's headless daemon with a seed and a context length (SDK).

Prints the load config that LM Studio reports back, as one JSON line, for the run's log.
"""

import argparse
import json
import sys

import lmstudio as lms


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--file", required=True)
    parser.add_argument("--identifier", required=True)
    parser.add_argument("--context-length", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--gpu", default="max")
    args = parser.parse_args()
    gpu = {"ratio": 1.0} if args.gpu == "max" else {"ratio": float(args.gpu)}
    with lms.Client() as client:
        found = [m for m in client.llm.list_downloaded()
                 if args.file in (m.model_key, str(getattr(m.info, "path", "")).rsplit("/", 1)[-1])]
        if not found:
            keys = ", ".join(m.model_key for m in client.llm.list_downloaded())
            print(f"load_model: error: {args.file} is not among LM Studio's models ({keys})", file=sys.stderr)
            return 2
        model = client.llm.load_new_instance(
            found[0].model_key, args.identifier, ttl=None,
            config={"contextLength": args.context_length, "seed": args.seed, "gpu": gpu})
        config = model.get_load_config()
        print("lmstudio load config: " + json.dumps(config.to_dict() if hasattr(config, "to_dict") else str(config)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
