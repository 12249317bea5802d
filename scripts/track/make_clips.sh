#!/usr/bin/env bash
# Makes the four clips of the tracker evaluation (zcpipe issue 13, benches/track_eval.py) in
# build/track-eval/clips/. Idempotent: a clip is remade only when its recipe or source changed.
# Sources (see tests/data/PROVENANCE.md, both CC BY 4.0, intel-iot-devkit/sample-videos):
#   person.mp4     = tests/data/one-by-one-person-detection.mp4, copied as is
#   cars.mp4       = tests/data/car-detection.mp4, copied as is (its AAC track included)
#   two-people.mp4 = the person clip beside itself shifted by SHIFT frames (hstack, 1536x432)
#   misses.mp4     = the person clip with the BLANKS runs of frames painted black
# Both made clips are H.264 (libx264 crf 18, keyframe every 10 frames), constant 10 fps,
# one output frame per input frame. The ground truth of the made ones is derived from the
# hand-made tests/data/track/person.gt.txt by scripts/track/derive_gt.py with the same
# parameters; this script checks that tests/data/track/ holds exactly that derivation.
set -euo pipefail
cd "$(dirname "$0")/../.."

SRC=tests/data/one-by-one-person-detection.mp4
CARS=tests/data/car-detection.mp4
OUT=build/track-eval/clips
GT=tests/data/track
SRC_FRAMES=1394
WIDTH=768
# two-people: right half = source frame n + SHIFT. 180 (18 s) gives about 730 of its 1214
# frames a person in each half (shifts of 20-60 give more, but then each half shows the same
# person a few seconds apart), and the halves' people enter and leave at different times.
SHIFT=180
LENGTH=$((SRC_FRAMES - SHIFT))
# misses: 0-based inclusive runs of 2-4 black frames, each while a person is in view (standing,
# walking in or walking out), each ending 4-6 frames before an annotated frame in which the
# person is still in view: a tracker that lost the person in the gap has had the 3 frames of
# the default --track-confirm to confirm a new track by then, so the ID switch is scored.
BLANKS="114-116 153-156 184-186 233-234 294-296 353-356 434-436 513-515 574-575 633-636 684-686 753-755 813-816 853-855 933-934 993-996 1074-1076 1133-1136 1183-1185 1253-1255 1294-1295 1344-1346"
X264=(-c:v libx264 -preset medium -crf 18 -g 10 -pix_fmt yuv420p -fps_mode cfr -r 10 -an)

command -v ffmpeg >/dev/null && command -v ffprobe >/dev/null || { echo "make_clips: ffmpeg/ffprobe missing (bash scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$OUT"

frames_of() { ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$1"; }
rate_of() { ffprobe -v error -select_streams v:0 -show_entries stream=r_frame_rate -of csv=p=0 "$1"; }

# copy SRC DST: byte copy unless identical
copy() { cmp -s "$1" "$2" 2>/dev/null || { cp "$1" "$2.tmp" && mv "$2.tmp" "$2"; echo "make_clips: $2 <- $1"; }; }

# make DST RECIPE-TEXT CMD...: runs CMD (writing DST.tmp.mp4) unless DST.recipe equals RECIPE-TEXT
make() {
    local dst=$1 recipe=$2; shift 2
    if [ -f "$dst" ] && [ "$(cat "$dst.recipe" 2>/dev/null)" = "$recipe" ]; then return; fi
    echo "make_clips: making $dst"
    nice -n 19 "$@"
    mv "$dst.tmp.mp4" "$dst"
    printf '%s' "$recipe" >"$dst.recipe"
}

copy "$SRC" "$OUT/person.mp4"
copy "$CARS" "$OUT/cars.mp4"

src_sum=$(sha256sum "$SRC" | cut -d' ' -f1)
make "$OUT/two-people.mp4" "v1 $src_sum shift=$SHIFT length=$LENGTH ${X264[*]}" \
    ffmpeg -v error -y -i "$SRC" -filter_complex \
    "[0:v]split=2[a][b];[a]trim=start_frame=0:end_frame=$LENGTH,setpts=PTS-STARTPTS[l];[b]trim=start_frame=$SHIFT:end_frame=$SRC_FRAMES,setpts=PTS-STARTPTS[r];[l][r]hstack=inputs=2[v]" \
    -map "[v]" "${X264[@]}" "$OUT/two-people.mp4.tmp.mp4"

enable=$(for r in $BLANKS; do printf 'between(n,%s,%s)+' "${r%-*}" "${r#*-}"; done)
enable=${enable%+}
make "$OUT/misses.mp4" "v1 $src_sum blanks=$BLANKS ${X264[*]}" \
    ffmpeg -v error -y -i "$SRC" -vf "drawbox=x=0:y=0:w=iw:h=ih:color=black:t=fill:enable='$enable'" \
    "${X264[@]}" "$OUT/misses.mp4.tmp.mp4"

# frame counts and rates (every frame decoded: -count_frames)
status=0
for c in person:$SRC_FRAMES:10/1 cars:377:25/2 two-people:$LENGTH:10/1 misses:$SRC_FRAMES:10/1; do
    IFS=: read -r name want rate <<<"$c"
    got=$(frames_of "$OUT/$name.mp4"); r=$(rate_of "$OUT/$name.mp4")
    if [ "$got" != "$want" ] || [ "$r" != "$rate" ]; then
        echo "make_clips: $OUT/$name.mp4 has $got frames at $r fps, expected $want at $rate" >&2; status=1
    else
        echo "make_clips: $OUT/$name.mp4: $got frames, $r fps"
    fi
done

# the derived ground truth must be what tests/data/track/ holds
python3 scripts/track/derive_gt.py --gt-dir "$GT" --out "$OUT/derived" --shift "$SHIFT" --length "$LENGTH" --width "$WIDTH" --blanks "$BLANKS" >/dev/null
for f in two-people.gt.txt two-people.frames.txt misses.gt.txt misses.frames.txt; do
    cmp -s "$OUT/derived/$f" "$GT/$f" || { echo "make_clips: $GT/$f differs from its derivation $OUT/derived/$f (rerun derive_gt.py into $GT)" >&2; status=1; }
done
exit $status
