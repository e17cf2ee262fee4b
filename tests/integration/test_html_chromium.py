"""The fleet report's HTML page rendered by a real browser (Debian's headless Chromium).

The report comes from a real run of ``playbooks/preflight.yml`` over the simulated fleet plus one
host that refuses connections. Then Chromium

- parses it (``--dump-dom``): the matrix has one row per host, each cell carries the state the YAML
  report gives for that host and manufacturer, the unreachable host is listed, the filter links and
  every in-page link point at an element that exists;
- paints it (``--screenshot``): a valid PNG whose pixels include the page's ok-green and
  unavailable-red (decoded here with zlib + struct, no image library);
- applies the CSS-only filters: the ``#only-unavailable`` screenshot loses the green rows and the
  orange unreachable row while keeping the red one, and, in a copy of the page with a probe script
  appended (the report itself has no JavaScript), the computed ``display`` of every row under each
  fragment, and after clicking each filter link, is exactly the set of hosts the filter names.

Chromium runs inside a network namespace that has only loopback when this is root, so whatever it
might try to reach, nothing leaves the machine; otherwise with its background networking disabled.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
import zlib
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, REPO
from tests.tools import netns_hosts as nh

pytestmark = pytest.mark.ansible

FLEET = REPO / "examples" / "simulated-fleet" / "inventory.yml"
UNREACHABLE = "gone-01"
# the state colours of operator/src/gpustack_operator/report/fleet.py (_CSS)
OK_GREEN = (0xD4, 0xF4, 0xDD)
UNAVAILABLE_RED = (0xF9, 0xD0, 0xD0)
UNREACHABLE_ORANGE = (0xFF, 0xE3, 0xB3)
WINDOW = (1400, 900)
FILTERS = ["#all", "#only-unavailable", "#only-ok", "#only-not-declared", "#only-unreachable"]

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication",
    "--metrics-recording-only",
    "--hide-scrollbars",
]


# --- the report ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A fleet report written by the real playbook: the simulated fleet + one unreachable host."""
    work = tmp_path_factory.mktemp("html-report")
    extra = work / "unreachable.yml"
    extra.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        UNREACHABLE: {
                            "ansible_connection": "ssh",
                            "ansible_host": "127.0.0.1",
                            "ansible_port": 1,
                            "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes "
                            "-o UserKnownHostsFile=/dev/null",
                        }
                    }
                }
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUSTACK_", "ANSIBLE_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"),
        ANSIBLE_REMOTE_TEMP=str(work / "ansible-tmp"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(work / "cp"),
        ANSIBLE_NOCOLOR="1",
        PATH=f"{BIN}:{env.get('PATH', '')}",
    )
    reports = work / "reports"
    proc = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            str(REPO / "playbooks" / "preflight.yml"),
            "-i",
            str(FLEET),
            "-i",
            str(extra),
            "-e",
            f"preflight_report_dir={reports}",
            "-e",
            "preflight_fail_on=never",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fleet preflight: 20 hosts, 18 ok, 1 unavailable, 1 unreachable" in proc.stdout
    (html_path,) = reports.glob("preflight-*.html")
    (yaml_path,) = reports.glob("preflight-*.yaml")
    return {"html": html_path, "yaml": yaml_path, "work": work}


# --- running Chromium ------------------------------------------------------------------------------


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no chromium: run tests/tools/system_deps.sh (Debian package chromium)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The command prefix that runs Chromium: inside a loopback-only network namespace as root."""
    binary = chromium_binary()
    home = tmp_path_factory.mktemp("chromium-home")
    base = [
        "env",
        f"HOME={home}",
        f"XDG_CONFIG_HOME={home / 'config'}",
        f"XDG_CACHE_HOME={home / 'cache'}",
        "DBUS_SESSION_BUS_ADDRESS=disabled:",
        binary,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={home / 'profile'}",
    ]
    if nh.unavailable() is None:
        with nh.isolated_netns(f"gpa-chromium-{os.getpid()}") as prefix:
            yield [*prefix, *base]
    else:
        yield base


def run_browser(browser: list[str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [*browser, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped as a whole, by its id, on a hang
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"chromium did not finish in {timeout}s: {err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def dump_dom(browser: list[str], url: str) -> str:
    proc = run_browser(browser, "--dump-dom", url)
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def screenshot(browser: list[str], url: str, dest: Path) -> Path:
    proc = run_browser(browser, f"--screenshot={dest}", f"--window-size={WINDOW[0]},{WINDOW[1]}", url)
    assert proc.returncode == 0 and dest.is_file(), proc.stderr[-2000:]
    return dest


# --- the DOM ---------------------------------------------------------------------------------------


class Element:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Element | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Element] = []
        self.text_parts: list[str] = []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join([*self.text_parts, *(c.text() for c in self.children)])

    def iter(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            yield from child.iter()

    def find_all(self, tag: str, **attrs: str) -> list[Element]:
        return [e for e in self.iter() if e.tag == tag and all(e.attrs.get(k) == v for k, v in attrs.items())]

    def children_tagged(self, *tags: str) -> list[Element]:
        return [c for c in self.children if c.tag in tags]


VOID = {"meta", "link", "br", "hr", "img", "input", "col", "wbr", "source", "area", "base", "embed"}


class Tree(HTMLParser):
    """Chromium's serialisation of its DOM, read back as a tree (it closes every element)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = Element(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(el)
        if tag not in VOID:
            self.cur = el

    def handle_endtag(self, tag: str) -> None:
        node: Element | None = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data: str) -> None:
        self.cur.text_parts.append(data)


def parse(dom: str) -> Element:
    tree = Tree()
    tree.feed(dom)
    tree.close()
    return tree.root


@pytest.fixture(scope="module")
def dom(report: dict[str, Path], browser: list[str]) -> Element:
    return parse(dump_dom(browser, report["html"].as_uri()))


@pytest.fixture(scope="module")
def fleet_doc(report: dict[str, Path]) -> dict[str, object]:
    doc = yaml.safe_load(report["yaml"].read_text())
    assert isinstance(doc, dict)
    return doc


def matrix_rows(dom: Element) -> list[Element]:
    (table,) = dom.find_all("table", id="matrix")
    (tbody,) = table.children_tagged("tbody")
    return tbody.children_tagged("tr")


def test_matrix_has_one_row_per_host_with_its_status(dom: Element, fleet_doc: dict[str, object]) -> None:
    hosts = fleet_doc["hosts"]
    assert isinstance(hosts, dict)
    rows = matrix_rows(dom)
    assert [r.attrs["data-host"] for r in rows] == sorted(hosts)
    assert len(rows) == 20
    for row in rows:
        status = hosts[row.attrs["data-host"]]["status"]
        assert f"status-{status}" in row.classes
        status_cell = row.children_tagged("td")[0]
        assert status_cell.classes == {status} and status_cell.text().strip() == status


def test_cells_carry_each_manufacturers_state(dom: Element, fleet_doc: dict[str, object]) -> None:
    hosts = fleet_doc["hosts"]
    assert isinstance(hosts, dict)
    (table,) = dom.find_all("table", id="matrix")
    header = [th.text().strip() for th in table.children_tagged("thead")[0].find_all("th")]
    manufacturers = header[2:]
    assert manufacturers == sorted(
        ["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]
    )
    seen: Counter[str] = Counter()
    for row in matrix_rows(dom):
        entry = hosts[row.attrs["data-host"]]
        cells = [c for c in row.children_tagged("td") if "state" in c.classes]
        assert [c.attrs["data-manufacturer"] for c in cells] == manufacturers
        answers = {g["manufacturer"]: g["detection"] for g in (entry.get("report") or {}).get("accelerators", [])}
        for cell in cells:
            detection = answers.get(cell.attrs["data-manufacturer"])
            if detection is None:  # nothing asked (the unreachable host): an empty, uncoloured cell
                assert "none" in cell.classes and cell.text().strip() == "—"
                seen["none"] += 1
                continue
            state = detection["state"]
            assert cell.attrs["data-state"] == state and state in cell.classes
            summary = cell.find_all("summary")[0].text()
            assert summary.startswith(f"{state} · {detection['accelerators']}" if detection["accelerators"] else state)
            seen[state] += 1
    # 19 hosts answered (15 ok answers: 13 hosts with one manufacturer, one with two), 1 unreadable
    # host (9 unavailable answers), 1 unreachable host (9 empty cells)
    assert seen == {"ok": 15, "unavailable": 9, "none": 9, "not-declared": 19 * 9 - 15 - 9}

    def cell(host: str, manufacturer: str) -> Element:
        (row,) = [r for r in matrix_rows(dom) if r.attrs["data-host"] == host]
        (found,) = [c for c in row.children_tagged("td") if c.attrs.get("data-manufacturer") == manufacturer]
        return found

    assert cell("hgx-h100-01", "nvidia").find_all("summary")[0].text().startswith("ok · 8")
    assert cell("l40s-mellanox-01", "nvidia").find_all("summary")[0].text().startswith("ok · 4")
    assert cell("mi300x-01", "amd").attrs["data-state"] == "ok"
    assert cell("atlas-910b-01", "ascend").attrs["data-state"] == "ok"
    assert cell("broken-sysfs-01", "nvidia").attrs["data-state"] == "unavailable"
    assert cell("cpu-vm-01", "nvidia").attrs["data-state"] == "not-declared"


def test_unreachable_host_is_listed(dom: Element) -> None:
    (row,) = [r for r in matrix_rows(dom) if r.attrs["data-host"] == UNREACHABLE]
    assert "status-unreachable" in row.classes
    (section,) = dom.find_all("section", id=f"h-{UNREACHABLE}")
    assert "unreachable" in section.find_all("h2")[0].text()
    assert "Connection refused" in section.text()
    assert dom.find_all("span", id="sum-unreachable")[0].text().strip() == "unreachable: 1"


def test_filter_links_and_every_in_page_link_resolve(dom: Element) -> None:
    (nav,) = [e for e in dom.find_all("nav") if "filters" in e.classes]
    assert [a.attrs["href"] for a in nav.find_all("a")] == FILTERS
    ids = {e.attrs["id"] for e in dom.iter() if "id" in e.attrs}
    links = [a.attrs["href"] for a in dom.find_all("a") if a.attrs.get("href", "").startswith("#")]
    assert len(links) > len(FILTERS) + 20  # the filters, one link per host, one per cell with an answer
    assert [h for h in links if h[1:] not in ids] == []
    assert not dom.find_all("script")  # plain HTML: the page works without JavaScript


# --- the pixels ------------------------------------------------------------------------------------


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, RGB bytes) of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    width = height = 0
    channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in chunk {kind!r}"
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride, bpp = width * channels, channels
    assert len(raw) == height * (stride + 1)
    out = bytearray(height * stride)
    prev = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind_byte, cur = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind_byte == 1:  # Sub
            for i in range(bpp, stride):
                cur[i] = (cur[i] + cur[i - bpp]) & 0xFF
        elif kind_byte == 2:  # Up
            cur = bytearray((a + b) & 0xFF for a, b in zip(cur, prev, strict=True))
        elif kind_byte == 3:  # Average
            for i in range(stride):
                left = cur[i - bpp] if i >= bpp else 0
                cur[i] = (cur[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind_byte == 4:  # Paeth
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        else:
            assert kind_byte == 0, f"unknown PNG filter {kind_byte}"
        out[y * stride : (y + 1) * stride] = cur
        prev = bytes(cur)
    if channels == 4:
        rgb = bytearray(width * height * 3)
        rgb[0::3], rgb[1::3], rgb[2::3] = out[0::4], out[1::4], out[2::4]
        return width, height, bytes(rgb)
    return width, height, bytes(out)


def colours(png: Path) -> Counter[tuple[int, int, int]]:
    data = png.read_bytes()
    width, height, rgb = decode_png(data)
    assert (width, height) == WINDOW
    return Counter(zip(rgb[0::3], rgb[1::3], rgb[2::3], strict=True))


@pytest.fixture(scope="module")
def shots(report: dict[str, Path], browser: list[str]) -> dict[str, Path]:
    out = report["work"] / "shots"
    out.mkdir(exist_ok=True)
    uri = report["html"].as_uri()
    return {
        name: screenshot(browser, uri + fragment, out / f"{name}.png")
        for name, fragment in (("plain", ""), ("all", "#all"), ("only-unavailable", "#only-unavailable"))
    }


def test_screenshot_is_a_png_with_the_state_colours(shots: dict[str, Path]) -> None:
    png = shots["plain"]
    assert png.stat().st_size > 20_000
    counts = colours(png)
    assert len(counts) > 20  # text, borders, backgrounds: not a blank page
    # whole cells of each colour, not a stray pixel: a matrix cell is ~120 x 60 px
    assert counts[OK_GREEN] > 10 * 5000, counts.most_common(8)
    assert counts[UNAVAILABLE_RED] > 9 * 5000, counts.most_common(8)
    assert counts[UNREACHABLE_ORANGE] > 1000, counts.most_common(8)


def test_only_unavailable_filter_hides_the_other_rows_on_screen(shots: dict[str, Path]) -> None:
    everything, filtered = colours(shots["all"]), colours(shots["only-unavailable"])
    # the ok rows (green status cells and ok answers) and the orange unreachable row disappear ...
    assert everything[OK_GREEN] > 10 * 5000
    assert filtered[OK_GREEN] < everything[OK_GREEN] / 20, (filtered[OK_GREEN], everything[OK_GREEN])
    assert everything[UNREACHABLE_ORANGE] > 1000 and filtered[UNREACHABLE_ORANGE] == 0
    # ... while the row with unavailable answers stays, all of it
    assert filtered[UNAVAILABLE_RED] > 0.9 * everything[UNAVAILABLE_RED] > 9 * 5000


PROBE = """<script>
addEventListener("load", () => {
  const shown = () => [...document.querySelectorAll("#matrix tbody tr")]
    .filter((tr) => getComputedStyle(tr).display !== "none").map((tr) => tr.dataset.host);
  const target = document.querySelector(":target");
  const out = {target: target ? target.id : null, shown: shown(), clicks: {}};
  for (const a of document.querySelectorAll("nav.filters a")) {
    a.click();
    out.clicks[a.getAttribute("href")] = shown();
  }
  const pre = document.createElement("pre");
  pre.id = "gpa-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def probe(browser: list[str], page: Path, fragment: str) -> dict[str, object]:
    dom = parse(dump_dom(browser, page.as_uri() + fragment))
    (pre,) = dom.find_all("pre", id="gpa-probe")
    result = json.loads(pre.text())
    assert isinstance(result, dict)
    return result


def test_css_filters_by_computed_style_and_by_clicking(
    report: dict[str, Path], browser: list[str], fleet_doc: dict[str, object]
) -> None:
    hosts = fleet_doc["hosts"]
    assert isinstance(hosts, dict)
    page = report["work"] / "probed.html"
    page.write_text(report["html"].read_text().replace("</body>", PROBE + "</body>"))

    def rows_with(predicate: object) -> list[str]:
        assert callable(predicate)
        return sorted(h for h, e in hosts.items() if predicate(e))

    def states(entry: dict[str, object]) -> set[str]:
        report_doc = entry.get("report") or {}
        assert isinstance(report_doc, dict)
        return {g["detection"]["state"] for g in report_doc.get("accelerators", [])}

    expected = {
        "#all": sorted(hosts),
        "#only-unavailable": rows_with(lambda e: "unavailable" in states(e)),
        "#only-ok": rows_with(lambda e: e["status"] == "ok"),
        "#only-not-declared": rows_with(lambda e: "not-declared" in states(e)),
        "#only-unreachable": rows_with(lambda e: e["status"] in ("unreachable", "failed")),
    }
    assert expected["#only-unavailable"] == ["broken-sysfs-01"]
    assert expected["#only-unreachable"] == [UNREACHABLE]
    assert len(expected["#only-ok"]) == 18

    for fragment in ["", *FILTERS]:
        result = probe(browser, page, fragment)
        # loaded with the fragment: :target matches it, and the rows shown are the filter's
        assert result["target"] == (fragment[1:] or None)
        assert result["shown"] == expected.get(fragment, sorted(hosts)), fragment
        # clicking each filter link (same-document navigation) re-filters the rows
        assert result["clicks"] == expected, fragment
