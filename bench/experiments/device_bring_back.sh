#!/bin/bash
# Models trained on the GPU machine, brought back to this machine in parts (the device tool returns
# at most 64 MiB from one call: four parts of 15 MiB; a fifth is left out as over the total): a pick of `compressor auto`, a chain's INT8 graph, to be
# timed here on the 2-core CPU beside the committed chains in one bench run (issues 32 and 34).
#   on the device, once:     bash bench/experiments/device_bring_back.sh pack NAME FOLDER...
#       every FOLDER (a run's stage folder, say) into one tar stream, split into ~/back/NAME/part.NNN
#       of 15 MiB; prints how many calls the parts take
#   on the device, per call: bash bench/experiments/device_bring_back.sh give NAME CALL
#       copies parts 4*CALL .. 4*CALL+3 into the call's $OUT (CALL 0, 1, ...)
#   here, after the calls:   bash bench/experiments/device_bring_back.sh unpack DEST FILES_AT...
#       joins the parts of the given device result folders (/work/.device/N/) in order into DEST and
#       checks the stream's sha256 against the one pack wrote (NAME.sha256.txt, in the last call)
# Each call must follow the last within 30 s (the machine goes back after that, and ~/back with it).
# Weights of a training stage are large (a 6-layer student in FP32: ~270 MB): bring back the ONNX
# graphs (04-export, 05-quantize), not the checkpoints.
set -euo pipefail
mode=${1:?pack, give or unpack}; shift
PART_MB=${BRING_BACK_PART_MB:-15}   # MiB a part (the tool returns 16 MiB a file at most)
PER_CALL=${BRING_BACK_PER_CALL:-4}  # parts a call (64 MiB a call in all)
case "$mode" in
  pack)
    name=${1:?NAME}; shift
    [ $# -gt 0 ] || { echo "pack NAME FOLDER...: give at least one folder" >&2; exit 2; }
    for f in "$@"; do [ -d "$f" ] || { echo "pack: $f is not a folder" >&2; exit 2; }; done
    dir=~/back/$name; rm -rf "$dir"; mkdir -p "$dir"
    # folders by their paths as given (relative ones stay relative in the stream)
    tar -c "$@" | split -b "${PART_MB}M" -d -a 3 - "$dir/part."
    cat "$dir"/part.* | sha256sum | cut -d' ' -f1 > "$dir/sha256.txt"
    parts=$(ls "$dir" | grep -c '^part\.')
    echo "$name: $parts parts of ${PART_MB} MiB, $(( (parts + 1 + PER_CALL - 1) / PER_CALL )) call(s) (give $name 0, 1, ...)"
    ;;
  give)
    name=${1:?NAME}; call=${2:?CALL}
    : "${OUT:?OUT=the output folder of the device call}"
    dir=~/back/$name
    [ -d "$dir" ] || { echo "give: nothing packed as $name (pack it first, in this machine's session)" >&2; exit 2; }
    mapfile -t files < <(ls "$dir" | sort)   # part.000 ... then sha256.txt
    first=$((PER_CALL * call)); n=0
    for f in "${files[@]:$first:$PER_CALL}"; do cp "$dir/$f" "$OUT/$name.$f"; n=$((n + 1)); done
    echo "$name: call $call gave $n file(s) of ${#files[@]}"
    ;;
  unpack)
    dest=${1:?DEST}; shift
    [ $# -gt 0 ] || { echo "unpack DEST FILES_AT...: give the device result folders" >&2; exit 2; }
    [ -e "$dest" ] && { echo "unpack: $dest exists (nothing is overwritten)" >&2; exit 2; }
    # in the order of their numbers, whichever call brought each
    parts=$(for d in "$@"; do ls "$d"/*.part.[0-9][0-9][0-9] 2>/dev/null || true; done \
      | awk -F'part.' '{print $NF" "$0}' | sort -n | cut -d' ' -f2-)
    sums=$(for d in "$@"; do ls "$d"/*.sha256.txt 2>/dev/null || true; done | head -1)
    [ -n "$parts" ] || { echo "unpack: no parts in $*" >&2; exit 2; }
    got=$(cat $parts | sha256sum | cut -d' ' -f1)
    if [ -n "$sums" ] && [ "$got" != "$(cat "$sums")" ]; then
      echo "unpack: the parts' sha256 $got is not the packed stream's $(cat "$sums"): a part is missing or cut" >&2
      exit 1
    fi
    mkdir -p "$dest.tmp"
    if ! cat $parts | tar -x -C "$dest.tmp"; then   # without the sha256 file a cut stream shows here
      rm -rf "$dest.tmp"; echo "unpack: the parts do not make a whole archive: a part is missing or cut" >&2; exit 1
    fi
    mv "$dest.tmp" "$dest"
    echo "unpacked $(echo "$parts" | wc -l) part(s) into $dest${sums:+ (sha256 checked)}"
    ;;
  *) echo "mode must be pack, give or unpack, not $mode" >&2; exit 2 ;;
esac
