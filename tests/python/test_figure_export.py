"""`kvscope figure` as a paper's author uses it (issue 38): a trace of several runs exported to SVG, PDF and PNG at
print sizes, read back as files. The compare figure: maps a readable share of the page wide, one colour bar for
the runs (their range shared) and one for the difference, every run named, a difference map that is not one flat
colour. The summary: every run named under its bar and in a legend. PDF: a page 3.3 in wide for --size column.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable. Exits 77 (skipped) when the
executable was built without the GUI libraries `figure` needs.
"""
import base64
import os
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib

from checks import FAILURES, check, passed, run_in_temp_folder

PROMPT = ("In the old harbour town the fishermen mended their nets every morning while the gulls argued over "
          "scraps. The lighthouse keeper, who had not left his tower in eleven years, counted the boats as they "
          "went out and again as they came back. One evening a boat did not return. The keeper lit every lamp. "
          "Question: what did the keeper do when a boat did not return? Answer:")
RUNS = ["full", "snapkv_b25pct", "h2o_b25pct"]
SVG = "{http://www.w3.org/2000/svg}"


def kvscope(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=900)


def png_pixels(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB PNG, unfiltered by hand (no imaging library)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * 3, [], bytearray(width * 3)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b, c = prev[i], prev[i - 3] if i >= 3 else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, 3)])
        prev = line
    return width, height, rows


def texts(root):
    return ["".join(t.itertext()) for t in root.iter(SVG + "text")]


def body(folder):
    binary = os.environ.get("KVSCOPE_BINARY")
    trace = os.path.join(folder, "run.h5")
    cmd = ["trace", "--out", trace, "--budget", "25%", "--max-new-tokens", "8", "--quiet", "--prompt", PROMPT]
    for p in ("full", "snapkv", "h2o"):
        cmd += ["--policy", p]
    res = kvscope(binary, *cmd)
    if res.returncode != 0:
        check(False, f"kvscope trace runs ({res.stderr.strip()[-300:]})")
        return

    # Compare at a page's width: 7 in at 300 dpi.
    svg_path = os.path.join(folder, "compare.svg")
    res = kvscope(binary, "figure", trace, "--view", "compare", "--runs", ",".join(RUNS), "--layer", "2",
                  "--size", "page", "--out", svg_path)
    check(res.returncode == 0, f"figure --view compare --size page writes SVG ({res.stderr.strip()})")
    if res.returncode == 0:
        root = ET.parse(svg_path).getroot()
        width = float(root.get("width"))
        check(width == 2100, f"a page figure is 7 in x 300 dpi = 2100 px wide (got {width})")
        font = 9 * 300 / 72
        bars, maps = [], []
        for im in root.iter(SVG + "image"):
            if float(im.get("width")) < 2 * font:
                bars.append(im)  # a colour bar, one em wide
            elif float(im.get("height")) >= font:
                maps.append(im)  # (the key-mark strips under the maps are less than a line high)
        check(len(maps) == len(RUNS) + 1, f"a map per run and the difference ({len(maps)} maps)")
        check(all(float(m.get("width")) >= 0.18 * width for m in maps),
              f"every map is at least 18 % of the page wide (widths {[round(float(m.get('width'))) for m in maps]})")
        check(len(bars) == 2, f"one colour bar for the runs' shared range, one for the difference (got {len(bars)})")
        words = " ".join(texts(root))
        for r in RUNS:
            check(r in words, f"the compare figure names run {r}")
        diff = maps[-1].get("href").split(",", 1)[1]
        _, _, rows = png_pixels(base64.b64decode(diff))
        colours = {px for row in rows for px in row}
        check(len(colours) > 3, f"the difference map is not blank ({len(colours)} colours)")

    # The same view as PNG: the size the SVG has, in the same font.
    png_path = os.path.join(folder, "compare.png")
    res = kvscope(binary, "figure", trace, "--view", "compare", "--runs", ",".join(RUNS), "--layer", "2",
                  "--size", "page", "--out", png_path)
    check(res.returncode == 0, f"figure --view compare --size page writes PNG ({res.stderr.strip()})")
    if res.returncode == 0:
        with open(png_path, "rb") as f:
            head = f.read(24)
        check(struct.unpack(">I", head[16:20])[0] == 2100, "the PNG is 2100 px wide too")

    # The summary: every run under its bar and in the legend, in each of its panels.
    svg_path = os.path.join(folder, "summary.svg")
    res = kvscope(binary, "figure", trace, "--view", "summary", "--size", "column", "--out", svg_path)
    check(res.returncode == 0, f"figure --view summary --size column writes SVG ({res.stderr.strip()})")
    if res.returncode == 0:
        root = ET.parse(svg_path).getroot()
        labels = texts(root)
        for r in RUNS:
            check(labels.count(r) >= 2, f"the summary names {r} under its bar and in a legend ({labels.count(r)} times)")
        check(float(root.get("width")) == 990, "a column figure is 3.3 in x 300 dpi = 990 px wide")

    # PDF at a column's width: the page is 3.3 in = 237.6 pt wide.
    pdf_path = os.path.join(folder, "summary.pdf")
    res = kvscope(binary, "figure", trace, "--view", "summary", "--size", "column", "--style", "matplotlib",
                  "--out", pdf_path)
    check(res.returncode == 0, f"figure --out .pdf --style matplotlib writes PDF ({res.stderr.strip()})")
    if res.returncode == 0:
        with open(pdf_path, "rb") as f:
            pdf = f.read()
        check(pdf.startswith(b"%PDF-1.4") and pdf.rstrip().endswith(b"%%EOF"), "the PDF has its header and end")
        m = re.search(rb"/MediaBox \[0 0 ([0-9.]+) ([0-9.]+)\]", pdf)
        check(m is not None and abs(float(m.group(1)) - 237.6) < 0.01, f"the PDF page is 237.6 pt wide ({m and m.group(1)})")

    # Inches, and a size that is none of the forms.
    svg_path = os.path.join(folder, "inches.svg")
    res = kvscope(binary, "figure", trace, "--view", "summary", "--size", "3.3x2.5in", "--out", svg_path)
    check(res.returncode == 0 and ET.parse(svg_path).getroot().get("height") == "750", "--size 3.3x2.5in is 990 x 750 px")
    res = kvscope(binary, "figure", trace, "--view", "summary", "--size", "wide", "--out", svg_path + "2.svg")
    check(res.returncode != 0 and "column" in res.stderr and "3.3x2.5in" in res.stderr,
          f"an unknown --size is refused naming the forms ({res.stderr.strip()})")


def main():
    binary = os.environ.get("KVSCOPE_BINARY")
    if binary and os.path.exists(binary):
        res = kvscope(binary, "figure", "--help")
        if "without the GUI" in res.stderr + res.stdout:
            print("kvscope was built without the GUI libraries: skipped")
            sys.exit(77)
    code = run_in_temp_folder(binary, "kvscope_figure_export_", body)
    for f in FAILURES:
        print(f"  failed: {f}")
    sys.exit(code)


if __name__ == "__main__":
    main()
