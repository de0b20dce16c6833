#!/usr/bin/env bash
# test-plot-svg.sh - layers.svg of the synthetic report (tests/tools/synthetic-report.h, written by
# oscar-plot-synth; no model needed, seconds): well-formed XML (python3's xml.etree), 4 panels, a
# series per method and panel where the metric exists (3 methods: 11; 16 methods x 30 layers: 63),
# the hostile model name in the title as text, the same bytes on a second write; then rendered with
# rsvg-convert (Debian librsvg2-bin) to a non-empty PNG of the asked width, when it is installed.
source "$(dirname "$0")/common.sh"
S="$B/bin/oscar-plot-synth"
[ -x "$S" ] || fail "$S not built"
command -v python3 >/dev/null || skip "python3 missing"
"$S" "$T/a.svg" || fail "oscar-plot-synth failed"
"$S" "$T/b.svg" || fail "oscar-plot-synth failed (second run)"
cmp -s "$T/a.svg" "$T/b.svg" || fail "a second write differs"
"$S" --methods 16 --layers 30 "$T/many.svg" || fail "oscar-plot-synth --methods 16 failed"
# usage errors exit 2
set +e; "$S" --methods 0 "$T/x.svg" 2>/dev/null; rc=$?; set -e
[ "$rc" = 2 ] || fail "--methods 0: exit $rc, want 2"

python3 - "$T/a.svg" "$T/many.svg" <<'PYEOF' || fail "SVG structure"
import sys
import xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"

def check(path, n_methods, n_series, missing):
    root = ET.parse(path).getroot()          # raises on malformed XML
    assert root.tag == NS + "svg", root.tag
    panels = [e for e in root.iter(NS + "g") if e.get("class") == "panel"]
    assert [p.get("id") for p in panels] == ["panel-out_rel", "panel-k_rel_mse", "panel-v_rel_mse", "panel-kl"], panels
    series = [e for e in root.iter() if e.get("data-method") is not None]
    assert len(series) == n_series, (path, len(series))
    got = {(e.get("data-method"), e.get("data-panel")) for e in series}
    assert len(got) == n_series, "a method drawn twice in a panel"
    assert missing not in got, missing
    legend = [e.get("data-legend") for e in root.iter() if e.get("data-legend") is not None]
    assert len(legend) == n_methods and len(set(legend)) == n_methods, legend
    for e in series:                         # every series draws something
        assert any(c.tag in (NS + "path", NS + "circle") for c in e), e.attrib
    title = root.find(".//" + NS + "text[@id='title']")
    assert "".join(title.itertext()) == "oscar-verify: per-layer error, Evil & <Model> \"q\" 'a'", title.text
    caption = "".join(root.find(".//" + NS + "text[@id='caption']").itertext())
    for want in ("corpus held&out<1>.txt", "rotations rot<&>", "ctx 64", "sink 4", "recent 8", "group size 16",
                 "scale float16", "windows scored 2", "metric tokens 32"):
        assert want in caption, (want, caption)
    legend_text = " ".join("".join(e.itertext()) for e in root.iter(NS + "text"))
    assert "bf16 (exact, 0)" in legend_text and "1 NaN/inf point skipped" in legend_text, legend_text

check(sys.argv[1], 3, 11, ("oscar", "out_rel"))
check(sys.argv[2], 16, 63, ("oscar", "out_rel"))
print("SVG structure ok")
PYEOF

if command -v rsvg-convert >/dev/null; then
    rsvg-convert -w 1400 "$T/a.svg" -o "$T/a.png" || fail "rsvg-convert failed"
    [ -s "$T/a.png" ] || fail "empty PNG"
    python3 - "$T/a.png" <<'PYEOF' || fail "PNG"
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", b[16:24])
assert w == 1400 and h > 600, (w, h)
print("PNG", w, "x", h, len(b), "bytes")
PYEOF
else
    echo "rsvg-convert not installed (Debian librsvg2-bin): not rendered"
fi
echo "test-plot-svg: ok"
