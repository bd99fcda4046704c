"""Write a recipe run's stages (scores, sizes, wall times) and bench rows as one results file.

    python -m bench.experiments.record_stages RUN_DIR OUT.json
"""
import sys

from compressor.bench.report import collect
from compressor.core.io import read_json
from compressor.core.results import command_line, run_command, write_results


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    run, out = argv
    manifest = read_json(f"{run}/manifest.json")
    rows = collect([run])
    write_results(out, rows, command=run_command(manifest["source"], run),
                  stage_wall_time_s={s["dir"]: s.get("wall_time_s") for s in manifest["stages"]})
    print(command_line())


if __name__ == "__main__":
    main()
