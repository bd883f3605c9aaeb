"""`kvscope figure` as a paper's author uses it (issue 38): a trace of several runs exported to SVG, PDF and PNG at
print sizes, read back as files. The compare figure: maps a readable share of the page wide, one colour bar for
the runs (their range shared) and one for the difference, every run named, a difference map that is not one flat
colour, and for a policy that compresses after prefill the difference of the decode steps, cell for cell the one
numpy computes from the trace with h5py. The summary: every run named under its bar and in a legend. PDF: a page
3.3 in wide for --size column. One look in every format: each view's PNG equals its SVG rasterised by rsvg-convert
(legends, ticks, titles, colours), and no legend box holds a data point.

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

import numpy as np

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


def rgb_pixels(path):
    """An image file as a [height][width][3] int array, alpha composited on white (ImageMagick)."""
    size = subprocess.run(["identify", "-format", "%w %h", path], capture_output=True, text=True, check=True).stdout
    w, h = map(int, size.split())
    raw = subprocess.run(["convert", path, "-background", "white", "-alpha", "remove", "rgb:-"], capture_output=True,
                         check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(h, w, 3).astype(int)


def svg_path_points(d):
    return [(float(x), float(y)) for x, y in re.findall(r"[ML]([-0-9.e]+),([-0-9.e]+)", d)]


def legend_boxes(root):
    """The framed legends of line and bar plots: (x0, y0, x1, y1)."""
    boxes = []
    for r in root.iter(SVG + "rect"):
        if r.get("stroke") == "#cccccc" and r.get("fill") == "none":
            x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
            boxes.append((x, y, x + w, y + h))
    return boxes


def data_points(root):
    """Every vertex of the data drawn inside a plot's clip (lines, markers; bars as their corners)."""
    points = []
    for g in root.iter(SVG + "g"):
        if not (g.get("clip-path") or "").startswith("url(#clip"):
            continue
        for el in g.iter():
            if el.tag == SVG + "path" and el.get("stroke") not in (None, "#e0e0e0"):
                points += svg_path_points(el.get("d"))
            elif el.tag == SVG + "rect" and el.get("fill") not in (None, "none", "#ffffff"):
                x, y, w, h = (float(el.get(k)) for k in ("x", "y", "width", "height"))
                points += [(x, y), (x + w, y + h)]
    return points


def one_look(binary, trace, folder):
    """Each view at both print sizes as PNG and SVG: the PNG is the SVG's drawing (compared with rsvg-convert's
    rendering of the SVG, pixel by pixel), and no legend box covers a data point."""
    have_tools = all(subprocess.run(["which", t], capture_output=True).returncode == 0
                     for t in ("rsvg-convert", "convert", "identify"))
    for view in ("summary", "layer_stats", "budget", "timeline", "compare", "attention"):
        for size in ("column", "page"):
            name = os.path.join(folder, f"look_{view}_{size}")
            ok = True
            for ext in ("png", "svg"):
                res = kvscope(binary, "figure", trace, "--view", view, "--runs", ",".join(RUNS), "--layer", "2",
                              "--size", size, "--out", f"{name}.{ext}")
                ok &= res.returncode == 0
                check(res.returncode == 0, f"figure --view {view} --size {size} writes {ext} ({res.stderr.strip()})")
            if not ok:
                continue
            root = ET.parse(name + ".svg").getroot()
            points = data_points(root)
            for x0, y0, x1, y1 in legend_boxes(root):
                inside = [p for p in points if x0 < p[0] < x1 and y0 < p[1] < y1]
                check(not inside, f"{view} at {size}: the legend box ({x0:.0f},{y0:.0f})-({x1:.0f},{y1:.0f}) holds "
                                  f"no data point ({len(inside)} do, e.g. {inside[:2]})")
            if not have_tools:
                print("rsvg-convert or ImageMagick missing: PNG against SVG not compared")
                continue
            subprocess.run(["rsvg-convert", name + ".svg", "-o", name + "_svg.png"], check=True)
            png, svg = rgb_pixels(name + ".png"), rgb_pixels(name + "_svg.png")
            if png.shape != svg.shape:
                check(False, f"{view} at {size}: the PNG is {png.shape[1]}x{png.shape[0]}, the SVG {svg.shape[1]}x{svg.shape[0]}")
                continue
            # Antialiasing, hinting and rsvg's smoothing of embedded maps differ by a few pixels along edges; another
            # layout (a legend moved, other ticks, a title elsewhere) differs over far more.
            differ = float((np.abs(png - svg).max(axis=2) > 64).mean())
            check(differ < 0.04, f"{view} at {size}: the PNG is the SVG's drawing ({100 * differ:.1f} % of pixels "
                                 f"differ, at most 4 %)")


def decode_difference_is_the_traces(binary, trace, folder):
    """SnapKV compresses after prefill: its prefill map is the full cache's, so the difference map shows the decode
    steps, and its cells are snapkv's decode attention minus the full cache's as h5py reads them."""
    import h5py
    svg_path = os.path.join(folder, "compare_pair.svg")
    res = kvscope(binary, "figure", trace, "--view", "compare", "--runs", "full,snapkv_b25pct", "--layer", "2",
                  "--head", "1", "--size", "page", "--out", svg_path)
    check(res.returncode == 0, f"figure --view compare --runs full,snapkv_b25pct ({res.stderr.strip()})")
    if res.returncode != 0:
        return
    with h5py.File(trace, "r") as f:
        full = f["runs/full/decode_attention/layer_02"][:, 1, :].astype(np.float64)
        snap = f["runs/snapkv_b25pct/decode_attention/layer_02"][:, 1, :].astype(np.float64)
        prefill_same = np.array_equal(f["runs/full/attention/layer_02/head_01"][()],
                                      f["runs/snapkv_b25pct/attention/layer_02/head_01"][()]) \
            if "head_01" in f["runs/full/attention/layer_02"] else None
    rows, cols = min(full.shape[0], snap.shape[0]), min(full.shape[1], snap.shape[1])
    want = snap[:rows, :cols] - full[:rows, :cols]
    check(prefill_same is not False, "snapkv's prefill map equals the full cache's (it compresses after prefill)")
    check(np.abs(want).max() > 0, "the two runs' decode attention differs somewhere")
    root = ET.parse(svg_path).getroot()
    words = " ".join(texts(root))
    check("decode" in words, "the difference map's title says it shows the decode steps")
    font = 9 * 300 / 72
    maps = [im for im in root.iter(SVG + "image") if float(im.get("width")) >= 2 * font and float(im.get("height")) >= font]
    _, _, pixels = png_pixels(base64.b64decode(maps[-1].get("href").split(",", 1)[1]))
    got = np.array(pixels, dtype=int)
    check(got.shape[:2] == want.shape, f"the difference map has a cell per decode step and key ({got.shape[:2]} "
                                       f"against the trace's {want.shape})")
    if got.shape[:2] != want.shape:
        return
    # RdBu on a range symmetric about zero: zero is its near-white middle, red where snapkv attends more, blue less.
    big = np.abs(want) > 0.2 * np.abs(want).max()
    red, blue = got[..., 0] - got[..., 2], got[..., 2] - got[..., 0]
    check(big.any() and bool(np.all(red[big & (want > 0)] > 30)) and bool(np.all(blue[big & (want < 0)] > 30)),
          f"the cells where the runs differ most are red where snapkv attends more and blue where less "
          f"({int(big.sum())} cells)")
    zero = want == 0
    check(bool(np.all(np.abs(got[zero] - got[zero].mean(axis=0)).max(axis=1) < 8)) if zero.any() else True,
          "cells where the runs agree are all the scale's middle colour")


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

    one_look(binary, trace, folder)
    decode_difference_is_the_traces(binary, trace, folder)

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
