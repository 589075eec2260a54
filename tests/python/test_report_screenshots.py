"""`plan --report` and `capacity --report` rendered by headless Chromium (Debian's `chromium`): each page renders
its pictures offline (no request leaves the page), every <svg> survives the browser's parser, and the screenshot
shows the pictures' colours. Full-size screenshots are kept in $SHARDPLAN_SCREENSHOTS for people to look at.
Exits 77 (Meson: SKIP) where no Chromium is installed (Note [Visible skips] in tests/support/case_skip.h)."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import zlib

BIN = os.environ.get("SHARDPLAN_BIN", "build/shardplan")
SHOTS = os.environ.get("SHARDPLAN_SCREENSHOTS", "build/report-screenshots")
CHROMIUM = next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path), None)
WIDTH, HEIGHT = 1400, 3000
SCALE = 0.5  # the screenshot decoded here; pixels per CSS pixel


def read_png(path):
    """(width, height, channels, rows) of an 8-bit, non-interlaced RGB or RGBA PNG, as Chromium writes them."""
    with open(path, "rb") as png:
        data = png.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    position, compressed, header = 8, b"", None
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind, body = data[position + 4:position + 8], data[position + 8:position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            compressed += body
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, f"{path}: unexpected PNG format {header}"
    channels = 3 if colour == 2 else 4
    raw, stride, rows = zlib.decompress(compressed), width * channels, []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + ((left + up) >> 1)) & 255
            elif kind == 4:
                corner = previous[x - channels] if x >= channels else 0
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def colour_counts(path, colours):
    """Pixels of the screenshot within a few levels of each "#rrggbb", and the share of pixels that are not white."""
    width, height, channels, rows = read_png(path)
    wanted = {name: tuple(int(name[i:i + 2], 16) for i in (1, 3, 5)) for name in colours}
    counts, inked = {name: 0 for name in colours}, 0
    for row in rows:
        for x in range(0, width * channels, channels):
            pixel = row[x:x + 3]
            if min(pixel) < 245:
                inked += 1
            for name, rgb in wanted.items():
                if all(abs(pixel[i] - rgb[i]) <= 6 for i in range(3)):
                    counts[name] += 1
    return counts, inked / (width * height)


def chromium(*args, timeout=180):
    profile = tempfile.mkdtemp(prefix="shardplan-chromium-")
    try:
        # No sandbox (CI runs as root); every host name resolves to nothing, so a page that fetched would show it.
        done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               "--no-first-run", f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
                               *args], capture_output=True, text=True, timeout=timeout)
        return done
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class Reports(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="shardplan-reports-")
        os.makedirs(SHOTS, exist_ok=True)
        cls.plan = os.path.join(cls.work, "plan.html")
        cls.capacity = os.path.join(cls.work, "capacity.html")
        for args in (["plan", "--model", "llama3-8b", "--cluster", "8xH100-80GB", "--report", cls.plan],
                     # Types limited by host memory (A100-40GB below 2 nodes), GPU memory (RTX4090) or neither.
                     ["capacity", "--model", "llama3-70b", "--gpus", "A100-40GB,H100-80GB,RTX4090", "--max-gpus",
                      "256", "--ac", "full", "--report", cls.capacity]):
            done = subprocess.run([BIN, *args], capture_output=True, text=True)
            assert done.returncode == 0, (args, done.stderr)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def check_report(self, html_path, name, colours):
        with open(html_path) as page:
            html = page.read()
        for fetching in ("<script", "http://", "https://", " src=", "<link", "url("):
            self.assertNotIn(fetching, html, f"{name}: the page would fetch something")
        url = "file://" + os.path.abspath(html_path)
        # The browser's DOM keeps every picture: a malformed <svg> would be dropped or split by the parser.
        dom = chromium("--dump-dom", url)
        self.assertEqual(dom.returncode, 0, dom.stderr[-2000:])
        self.assertEqual(dom.stdout.count("<svg"), html.count("<svg"), f"{name}: <svg> elements lost")
        self.assertGreaterEqual(html.count("<svg"), 3)
        kept = os.path.join(SHOTS, f"{name}.png")
        for path, scale in ((kept, 1), (os.path.join(self.work, f"{name}-small.png"), SCALE)):
            shot = chromium(f"--window-size={WIDTH},{HEIGHT}", f"--force-device-scale-factor={scale}",
                            f"--screenshot={path}", url)
            self.assertEqual(shot.returncode, 0, shot.stderr[-2000:])
            self.assertTrue(os.path.getsize(path) > 10000, f"{path}: an empty screenshot")
        counts, inked = colour_counts(os.path.join(self.work, f"{name}-small.png"), colours)
        print(f"{name}: screenshot {kept}; {100 * inked:.1f}% of the page inked; pixels per colour {counts}")
        self.assertGreater(inked, 0.02)  # the pages are tall and mostly white; a blank one is 0
        for colour, count in counts.items():
            self.assertGreater(count, 20, f"{name}: colour {colour} missing from the screenshot")

    def test_plan_report(self):
        # Unit bars, the root unit's grey, the memory categories' colours (params, activations), the timeline's
        # forward ops.
        self.check_report(self.plan, "plan-report", ["#4e79a7", "#c9c9c9", "#edc948", "#f28e2b"])

    def test_capacity_report(self):
        # The GPU types' series, and the limits grid: compute (green), GPU memory (red), host memory (purple).
        self.check_report(self.capacity, "capacity-report", ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1"])


if __name__ == "__main__":
    if CHROMIUM is None:
        print("SKIP: no chromium on PATH (Debian: apt-get install chromium; scripts/setup installs it)")
        sys.exit(77)
    unittest.main(verbosity=2)
