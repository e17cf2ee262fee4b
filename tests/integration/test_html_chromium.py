"""The fleet report's HTML page rendered by a real browser (Debian's headless Chromium).

The report comes from a real run of ``playbooks/preflight.yml`` over the simulated fleet (with its
``preflight_expect`` entries) plus one host that refuses connections. Then Chromium

- parses it (``--dump-dom``): one row per host, worst first, in the YAML report's order, each with
  the status, the one-line reason of a host that is not ok and, for an ok host, its models x count
  and versions; the causes grouped across hosts and the fleet by model are the YAML's; every filter
  label names a radio button that exists; no script, and no "declared" / "not-declared" anywhere;
- paints it (``--screenshot``): a valid PNG whose pixels include the status colours of the page
  (decoded here with zlib + struct, no image library), worst first at the top of the first screen;
- applies the CSS-only filters: a copy with the "not ok" radio checked loses the green rows on
  screen while keeping the red, orange and yellow ones; and, in a copy with a probe script appended
  (the report itself has no JavaScript), clicking each filter label (status, manufacturer, cause,
  model, and a status x manufacturer combination) leaves exactly the rows the filter names displayed.

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
import sys
import zlib
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, REPO
from tests.tools import netns_hosts as nh

if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpustack.accelerators.plugins.module_utils import fleet_report as fleet

pytestmark = pytest.mark.ansible

FLEET = REPO / "examples" / "simulated-fleet" / "inventory.yml"
UNREACHABLE = "gone-01"


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


# the status colours of the page (plugins/module_utils/fleet_report.py)
OK_GREEN = rgb(fleet.COLOURS["ok"])
UNAVAILABLE_RED = rgb(fleet.COLOURS["unavailable"])
UNREACHABLE_ORANGE = rgb(fleet.COLOURS["unreachable"])
MISMATCH_YELLOW = rgb(fleet.COLOURS["mismatch"])
DEGRADED_BLUE = rgb(fleet.COLOURS["degraded"])
WINDOW = (1400, 900)

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
    assert "fleet preflight: 20 hosts, 16 ok, 2 unavailable, 1 unreachable, 1 mismatched; 2 degraded" in proc.stdout
    (html_path,) = reports.glob("preflight-*.html")
    (yaml_path,) = reports.glob("preflight-*Z.yaml")
    (side_path,) = reports.glob("preflight-*Z.documents.yaml")
    return {"html": html_path, "yaml": yaml_path, "documents": side_path, "work": work}


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
        self.content: list[str | Element] = []  # text and children, in document order

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(part if isinstance(part, str) else part.text() for part in self.content)

    def text_outside(self, skip: Any) -> str:
        """The text, leaving out the elements ``skip(element)`` is true of (and what they hold)."""
        return "".join(
            part if isinstance(part, str) else "" if skip(part) else part.text_outside(skip) for part in self.content
        )

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
        self.cur.content.append(el)
        if tag not in VOID:
            self.cur = el

    def handle_endtag(self, tag: str) -> None:
        node: Element | None = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data: str) -> None:
        self.cur.content.append(data)


def parse(dom: str) -> Element:
    tree = Tree()
    tree.feed(dom)
    tree.close()
    return tree.root


@pytest.fixture(scope="module")
def dom(report: dict[str, Path], browser: list[str]) -> Element:
    return parse(dump_dom(browser, report["html"].as_uri()))


@pytest.fixture(scope="module")
def fleet_doc(report: dict[str, Path]) -> dict[str, Any]:
    """The YAML report, each host's whole document put back under ``report`` from the side file."""
    doc = yaml.safe_load(report["yaml"].read_text())
    side = yaml.safe_load(report["documents"].read_text())
    assert isinstance(doc, dict) and doc["documents"] == report["documents"].name
    for host, document in side["hosts"].items():
        assert "report" not in doc["hosts"][host]
        doc["hosts"][host]["report"] = document
    return doc


def host_rows(dom: Element) -> list[Element]:
    (table,) = dom.find_all("table", id="hosts")
    (tbody,) = table.children_tagged("tbody")
    return tbody.children_tagged("tr")


def row_of(dom: Element, host: str) -> Element:
    (row,) = [r for r in host_rows(dom) if r.attrs["data-host"] == host]
    return row


def test_one_row_per_host_worst_first_with_its_status_and_reason(dom: Element, fleet_doc: dict[str, Any]) -> None:
    hosts = fleet_doc["hosts"]
    rows = host_rows(dom)
    assert [r.attrs["data-host"] for r in rows] == list(hosts)  # the YAML's order: worst first
    assert len(rows) == 20
    ranks = [fleet.RANK[r.attrs["data-status"]] for r in rows]
    assert ranks == sorted(ranks) and rows[0].attrs["data-host"] == UNREACHABLE
    for row in rows:
        entry = hosts[row.attrs["data-host"]]
        assert row.attrs["data-status"] == entry["status"] and f"s-{entry['status']}" in row.classes
        status_cell = row.children_tagged("td")[0]
        # an ok host whose RDMA links are down is never a plain green "ok"
        mark = "degraded" if entry["status"] == "ok" and entry.get("degraded") else entry["status"]
        assert status_cell.classes == {"st", mark} and status_cell.text().strip() == mark
        assert ("dg" in row.classes) == bool(entry.get("degraded"))
        summaries = row.find_all("summary")
        if entry["status"] == "ok":
            assert not summaries and "bad" not in row.classes
        else:  # the one-line reason inline (the console's width), the answers behind it
            assert [s.text() for s in summaries] == [fleet.cut(entry["reason"], fleet.CONSOLE_WIDTH)]
            assert "bad" in row.classes
    cells = [c.text() for c in row_of(dom, "hgx-h100-01").children_tagged("td")]
    assert cells[1:4] == ["NVIDIA H100 80GB HBM3 ×8", "550.54.15 · CUDA 12.4", "8/8"]
    assert row_of(dom, "mlu-metax-01").children_tagged("td")[1].text() == "MLU370-X8 ×2 · MXC500 ×2"
    assert row_of(dom, "cpu-vm-01").children_tagged("td")[1].text() == "no accelerator"
    assert row_of(dom, "rtx4090-01").children_tagged("td")[3].text() == "1/2"
    nodriver = row_of(dom, "nodriver-01")
    # a group the report cannot name a model for: what it knows, in words
    assert nodriver.children_tagged("td")[1].text() == "NVIDIA: driver not loaded, 2 on the bus"
    assert row_of(dom, "broken-sysfs-01").children_tagged("td")[1].text() == "all 9 manufacturers: could not measure"
    assert nodriver.find_all("summary")[0].text().startswith("NVIDIA: driver not loaded — the PCI bus shows 2")
    assert "install and load the vendor driver" in nodriver.text()  # the whole answer, behind the line
    assert "RDMA 9/10 ok: ib3 failed" in row_of(dom, "hgx-h100-01").text()
    assert hosts["hgx-h100-01"]["degraded"] == [
        'ib3 failed: the RDMA link is not usable: port 1: state="1: DOWN" phys_state="3: Disabled"'
    ]
    gone = row_of(dom, UNREACHABLE)
    assert "Connection refused" in gone.text() and gone.children_tagged("td")[1].text() == "—"


def test_causes_models_and_summary_are_the_yamls(dom: Element, fleet_doc: dict[str, Any]) -> None:
    (causes,) = dom.find_all("section", id="causes")
    items = causes.find_all("li")
    assert len(items) == len(fleet_doc["causes"]) == 4
    for item, cause in zip(items, fleet_doc["causes"], strict=True):
        (label,) = item.find_all("label")
        count = f"{len(cause['hosts'])} host{'' if len(cause['hosts']) == 1 else 's'}"
        assert label.text() == f"{count} {cause['title']}", label.text()
        # its hosts right after its title, its words after them
        (names,) = [e for e in item.find_all("span") if "hosts" in e.classes]
        assert names.text() == ", ".join(cause["hosts"]) and item.attrs["title"] == cause["text"]
        assert cause["status"] in label.classes
    assert [i.find_all("label")[0].text() for i in items] == [
        "1 host connection refused",
        "1 host NVIDIA: driver not loaded",
        "1 host all 9 manufacturers: could not measure",
        "1 host fewer accelerators than expected",
    ]
    (models,) = dom.find_all("section", id="models")
    (tbody,) = models.find_all("tbody")
    rows = [[c.text().strip() for c in r.children_tagged("td")] for r in tbody.children_tagged("tr")]
    assert len(rows) == len(fleet_doc["models"]) == 13
    for cells, model in zip(rows, fleet_doc["models"], strict=True):
        assert cells[0].startswith(model["model"]) and cells[1:3] == [str(model["accelerators"]), str(model["hosts"])]
    assert ["NVIDIA H100 80GB HBM3 NVIDIA", "8", "1", "550.54.15", "CUDA 12.4"] in rows
    summary = fleet_doc["summary"]
    for status in ("ok", "unavailable", "unreachable"):
        assert dom.find_all("label", id=f"sum-{status}")[0].text().startswith(f"{summary[status]} ")
    assert dom.find_all("label", id="sum-mismatch")[0].text() == "1 differ from expected"
    assert dom.find_all("label", id="sum-bad")[0].text() == "4 not ok"
    # the capability table: one row per manufacturer x capability of the YAML, each count its hosts';
    # the manufacturers some hosts answered no capability for, one line per note
    (section,) = dom.find_all("details", id="capabilities")
    totals, unanswered = fleet_doc["capabilities"]["totals"], fleet_doc["capabilities"]["notAnswered"]
    tbodies = section.find_all("tbody")
    rows = tbodies[0].children_tagged("tr") if tbodies else []
    assert len(rows) == len(totals)
    for row, total in zip(rows, totals, strict=True):
        cells = [c.text().strip() for c in row.children_tagged("td")]
        assert cells[1] == total["capability"] and cells[3] == total["depth"]
        assert cells[4:8] == [str(total["counts"][s]) for s in fleet.HOST_STATES]
    assert len(section.find_all("li")) == len(unanswered)
    # the simulated fleet's broken sysfs: no manufacturer measured, so none of its capabilities answered
    assert {n["manufacturer"] for n in unanswered if "broken-sysfs-01" in n["hosts"]} == set(fleet.MANUFACTURERS)


def test_filters_are_labels_of_radios_and_the_page_has_no_script(dom: Element) -> None:
    radios = {e.attrs["id"]: e for e in dom.find_all("input") if e.attrs.get("type") == "radio"}
    assert {
        "fs-all",
        "fs-bad",
        "fs-ok",
        "fs-degraded",
        "fm-all",
        "fm-nvidia",
        "fm-none",
        "fc-all",
        "fc1",
        "fd1",
    } <= set(radios)
    assert {r for r, e in radios.items() if "checked" in e.attrs} == {"fs-all", "fm-all", "fc-all"}
    labels = dom.find_all("label")
    assert len(labels) > 40
    assert [lb.attrs.get("for") for lb in labels if lb.attrs.get("for") not in radios] == []
    assert not dom.find_all("script")  # plain HTML: the page works without JavaScript
    (body,) = dom.find_all("body")
    # a detection's "not-declared" / depth "declared": nothing an operator acts on, never shown; a
    # capability row's state and depth are the answer (the capability table, a host's rows)
    capabilities = body.text_outside(lambda e: e.attrs.get("id") == "capabilities" or "caps" in e.classes)
    assert "declared" not in capabilities


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


def checked(page: Path, dest: Path, *radios: str) -> Path:
    """A copy of the page with these radio buttons checked instead of their group's "all" -- what
    clicking their labels does, without a script."""
    text = page.read_text(encoding="utf-8")
    for radio in radios:
        group = "fc" if radio.startswith(("fc", "fd")) else radio[:2]
        text = text.replace(f'id="{group}-all" hidden checked>', f'id="{group}-all" hidden>')
        text = text.replace(f'id="{radio}" hidden>', f'id="{radio}" hidden checked>')
    dest.write_text(text, encoding="utf-8")
    return dest


@pytest.fixture(scope="module")
def shots(report: dict[str, Path], browser: list[str]) -> dict[str, Path]:
    out = report["work"] / "shots"
    out.mkdir(exist_ok=True)
    not_ok = checked(report["html"], report["work"] / "not-ok.html", "fs-bad")
    return {
        "plain": screenshot(browser, report["html"].as_uri(), out / "plain.png"),
        "not-ok": screenshot(browser, not_ok.as_uri(), out / "not-ok.png"),
    }


def test_screenshot_is_a_png_with_the_status_colours_worst_first(shots: dict[str, Path]) -> None:
    png = shots["plain"]
    assert png.stat().st_size > 20_000
    counts = colours(png)
    assert len(counts) > 20  # text, borders, backgrounds: not a blank page
    # whole status cells of each colour on the first screen, not a stray pixel (a cell is ~115 x 25 px,
    # a summary chip or a cause's chip half that): the four hosts that are not ok at the top, the two
    # degraded ones, then ok below
    assert counts[OK_GREEN] > 4 * 2000, counts.most_common(8)
    assert counts[UNAVAILABLE_RED] > 2 * 2000, counts.most_common(8)
    assert counts[UNREACHABLE_ORANGE] > 2000, counts.most_common(8)
    assert counts[MISMATCH_YELLOW] > 2000, counts.most_common(8)
    # the two ok hosts whose RDMA links are down: their own colour, right below the ones that are not ok
    assert counts[DEGRADED_BLUE] > 2 * 2000, counts.most_common(8)


def test_not_ok_filter_hides_the_ok_rows_on_screen(shots: dict[str, Path]) -> None:
    everything, filtered = colours(shots["plain"]), colours(shots["not-ok"])
    # the ok rows' green status cells disappear (the "16 ok" chip stays) ...
    assert filtered[OK_GREEN] < everything[OK_GREEN] / 5, (filtered[OK_GREEN], everything[OK_GREEN])
    # ... while the rows that are not ok stay, all of them
    for colour in (UNAVAILABLE_RED, UNREACHABLE_ORANGE, MISMATCH_YELLOW):
        assert filtered[colour] >= 0.95 * everything[colour] > 0, colour


PROBE = """<script>
addEventListener("load", () => {
  const shown = () => [...document.querySelectorAll("#hosts tbody tr")]
    .filter((tr) => getComputedStyle(tr).display !== "none").map((tr) => tr.dataset.host);
  const out = {initial: shown(), clicks: {}, combined: null};
  // a filter's label where the page shows one (a status nobody has shows none), else its radio
  const click = (id) => (document.querySelector(`label[for="${id}"]`) || document.getElementById(id)).click();
  const radios = [...document.querySelectorAll("input[type=radio]")].map((r) => r.id);
  for (const id of radios) {
    click(id);
    out.clicks[id] = shown();
    for (const all of ["fs-all", "fm-all", "fc-all"]) click(all);
  }
  click("fs-ok"); click("fm-nvidia");
  out.combined = shown();
  const pre = document.createElement("pre");
  pre.id = "gpa-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_css_filters_by_computed_style_after_clicking(
    report: dict[str, Path], browser: list[str], fleet_doc: dict[str, Any]
) -> None:
    hosts: dict[str, Any] = fleet_doc["hosts"]
    page = report["work"] / "probed.html"
    page.write_text(report["html"].read_text().replace("</body>", PROBE + "</body>"))
    dom = parse(dump_dom(browser, page.as_uri()))
    (pre,) = dom.find_all("pre", id="gpa-probe")
    result = json.loads(pre.text())

    def rows_with(predicate: Any) -> list[str]:
        return [h for h, e in hosts.items() if predicate(e)]

    def manufacturers(entry: dict[str, Any]) -> set[str]:
        has = {i["manufacturer"] for i in entry.get("inventory", [])} | set(entry.get("expected") or {})
        answers = (entry.get("report") or {}).get("accelerators", [])
        return has | {g["manufacturer"] for g in answers if g["detection"]["state"] == "unavailable"}

    everyone = list(hosts)
    assert result["initial"] == everyone
    clicks = result["clicks"]
    assert clicks["fs-all"] == clicks["fm-all"] == clicks["fc-all"] == everyone
    assert clicks["fs-bad"] == ["gone-01", *[h for h in everyone[1:4]]] and len(clicks["fs-bad"]) == 4
    for status in fleet.STATUSES:
        assert clicks[f"fs-{status}"] == rows_with(lambda e, s=status: e["status"] == s), status
    # the degraded mark filters like a status: the hosts whose RDMA links are down
    assert clicks["fs-degraded"] == rows_with(lambda e: bool(e.get("degraded")))
    assert clicks["fs-degraded"] == ["hgx-h100-01", "l40s-mellanox-01"]
    assert clicks["fs-ok"] and clicks["fs-mismatch"] == ["rtx4090-01"] and clicks["fs-failed"] == []
    for name in fleet.MANUFACTURERS:
        assert clicks[f"fm-{name}"] == rows_with(lambda e, n=name: n in manufacturers(e)), name
    assert clicks["fm-none"] == rows_with(lambda e: not manufacturers(e))
    assert "cpu-vm-01" in clicks["fm-none"] and "broken-sysfs-01" in clicks["fm-thead"]
    for index, cause in enumerate(fleet_doc["causes"], start=1):
        assert clicks[f"fc{index}"] == cause["hosts"], cause["title"]
    for index, model in enumerate(fleet_doc["models"], start=1):
        holders = rows_with(lambda e, m=model: any(i["model"] == m["model"] for i in e.get("inventory", [])))
        assert len(clicks[f"fd{index}"]) == model["hosts"] and clicks[f"fd{index}"] == holders, model["model"]
    # a capability count: the hosts in that state for it (the YAML's list, in the page's order)
    for index, total in enumerate(fleet_doc["capabilities"]["totals"], start=1):
        for state, letter in fleet.STATE_LETTERS.items():
            if total["counts"][state]:
                radio = f"fk{index}{letter}"
                assert clicks[radio] == [h for h in everyone if h in total["hosts"][state]], (radio, total)
    # two axes at once: ok hosts with NVIDIA accelerators
    assert result["combined"] == rows_with(lambda e: e["status"] == "ok" and "nvidia" in manufacturers(e))
    assert result["combined"] == ["hgx-h100-01", "l40s-mellanox-01", "a100-mig-01"]  # degraded first


def test_a_topology_that_was_not_read_says_why_in_the_cell_title(dom: Element, fleet_doc: dict[str, Any]) -> None:
    for row in host_rows(dom):
        entry = fleet_doc["hosts"][row.attrs["data-host"]]
        cell = row.children_tagged("td")[4]
        topology = (entry.get("report") or {}).get("topology")
        if entry.get("report") is None:
            assert cell.text() == "" and "title" not in cell.attrs
        elif topology.get("note"):  # the simulated fleet's nodes carry no /proc: "not read", and why
            assert cell.text() == topology["policy"] and cell.attrs["title"] == topology["note"]
            assert cell.attrs["title"].startswith("not read: ")
        else:
            assert "title" not in cell.attrs
    assert "title" in row_of(dom, "hgx-h100-01").children_tagged("td")[4].attrs


NAMES_PROBE = """<script>
addEventListener("load", () => {
  const cut = (el) => el.scrollWidth > el.clientWidth + 1;
  const out = {causes: [], hosts: [], shown: 0};
  for (const li of document.querySelectorAll("#causes li")) {
    const names = li.querySelector(".hosts");
    const box = li.getBoundingClientRect();
    const outside = [...names.getClientRects()].some((r) => r.right > box.right + 1 || r.left < box.left - 1);
    if (cut(li) || outside) out.causes.push(names.textContent);
  }
  for (const th of document.querySelectorAll("#hosts tbody th")) {
    out.shown += 1;
    if (cut(th)) out.hosts.push(th.textContent);
  }
  const pre = document.createElement("pre");
  pre.id = "gpa-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_host_names_are_never_cut(report: dict[str, Path], fleet_doc: dict[str, Any], browser: list[str]) -> None:
    """Long host names (FQDNs), a dozen under one cause: neither a cause's line nor the hosts table
    cuts any of them off -- they wrap. The page is built by the collection's own code from the real
    documents of the run."""
    documents = [(h, e) for h, e in fleet_doc["hosts"].items() if e.get("report") is not None]
    results = [
        (
            f"gpu-node-{i:03d}.rack-{i % 7:02d}.datacenter-frankfurt-2.example.com",
            {"report": documents[i % 12][1]["report"]},
        )
        for i in range(40)
    ]
    page = report["work"] / "long-names.html"
    page.write_text(fleet.to_html(fleet.build(results)).replace("</body>", NAMES_PROBE + "</body>"), encoding="utf-8")
    (pre,) = parse(dump_dom(browser, page.as_uri())).find_all("pre", id="gpa-probe")
    found = json.loads(pre.text())
    assert found["shown"] == 40
    assert found["causes"] == [] and found["hosts"] == [], found
