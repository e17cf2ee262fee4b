# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report, part 4: the YAML files.

- ``preflight-<stamp>.yaml``: the summary, the causes, the models, the capability totals, the notes,
  then every host, worst first -- its status, one-line reason, inventory, expectation and differences,
  capability summary and RDMA links down; and the whole preflight document it registered only for a
  host that is not ok, so the file a person opens grows with what is wrong, not with the fleet
  (issue 17: 19 hosts wrote 590 KB, ~31 KB a host, nearly all of it ok hosts' documents);
- ``preflight-<stamp>.documents.yaml``: the whole documents of the other hosts (every ok host), named
  in the main file's ``documents`` and in each such host's ``document``, so nothing registered is lost.

PyYAML when it is importable (ansible-core brings it), JSON otherwise -- a YAML document too.
"""

import json

try:
    import yaml

    HAS_YAML = True
except ImportError:  # the report is still written, as JSON (a YAML document)
    yaml = None
    HAS_YAML = False


def stamp(report):
    """The file names' timestamp: ``20261129T100000Z``."""
    return report["generated"].replace("-", "").replace(":", "")


def documents_name(report):
    """The side file's name, beside the main YAML: ``preflight-<stamp>.documents.yaml``."""
    return "preflight-%s.documents.yaml" % stamp(report)


def main_name(report):
    return "preflight-%s.yaml" % stamp(report)


def kept(entry):
    """Whether the main YAML keeps the host's whole document: it is not ok. (A degraded host is ok: its
    entry names the links that are down, its document is in the side file.)"""
    return entry["report"] is not None and entry["status"] != "ok"


def cause_document(cause):
    """A cause as the YAML and the module return it (``capabilities`` when its rows name some)."""
    out = {"title": cause["title"], "status": cause["status"], "text": cause["text"], "hosts": list(cause["hosts"])}
    if cause.get("capabilities"):
        out["capabilities"] = list(cause["capabilities"])
    return out


def capabilities_document(capabilities):
    """The fleet's capability totals as the YAML and the module return them."""
    keys = ("manufacturer", "capability", "modes", "depth", "counts", "hosts", "reasons")
    return {
        "totals": [{k: item[k] for k in keys} for item in capabilities["totals"]],
        "notAnswered": [dict(note) for note in capabilities["notAnswered"]],
    }


def host_document(entry, side):
    """One host as the main YAML lists it; ``side``: the side file's name, where an ok host's whole
    document is."""
    item = {"status": entry["status"]}
    if entry["reason"]:
        item["reason"] = entry["reason"]
    if entry["message"]:
        item["message"] = entry["message"]
    if entry["degraded"]:
        item["degraded"] = list(entry["degraded"])
    if entry["inventory"]:
        item["inventory"] = [{k: v for k, v in i.items() if v is not None and k != "state"} for i in entry["inventory"]]
    if entry["expected"]:
        item["expected"] = entry["expected"]
    if entry["differences"]:
        item["differences"] = [d["text"] for d in entry["differences"]]
    if entry["capabilities"]:
        item["capabilities"] = entry["capabilities"]
    if kept(entry):
        item["report"] = entry["report"]
    elif entry["report"] is not None:
        item["document"] = "in " + side
    return item


def document(report):
    """The main YAML document: summary, the side file's name, causes, models, capabilities, notes,
    then every host (worst first), the whole registered document only where :func:`kept`."""
    side = documents_name(report)
    return {
        "generated": report["generated"],
        "summary": dict(report["summary"]),
        "documents": side,
        "causes": [cause_document(c) for c in report["causes"]],
        "models": [
            {k: m[k] for k in ("model", "manufacturer", "hosts", "accelerators", "driverVersions", "runtimeVersions")}
            for m in report["models"]
        ],
        "capabilities": capabilities_document(report["capabilities"]),
        "notes": [
            {k: n[k] for k in ("kind", "text", "hosts", "manufacturers") if n[k] or k == "hosts"}
            for n in report["notes"]
        ],
        "hosts": {entry["host"]: host_document(entry, side) for entry in report["hosts"]},
    }


def documents_document(report):
    """The side file: the whole registered document of every host the main YAML does not keep one
    for, by host, in the main YAML's order."""
    return {
        "generated": report["generated"],
        "report": main_name(report),
        "hosts": {e["host"]: e["report"] for e in report["hosts"] if e["report"] is not None and not kept(e)},
    }


if HAS_YAML:

    class _Dumper(getattr(yaml, "CSafeDumper", None) or yaml.SafeDumper):  # libyaml's emitter when built with it
        """Safe, and never an anchor: two hosts that registered equal documents each get theirs in full."""

        def ignore_aliases(self, data):
            return True


def dump(doc, use_yaml=None):
    """``doc`` as YAML (PyYAML), or as JSON -- a YAML document too -- where PyYAML is missing (or
    ``use_yaml`` is false)."""
    if not (HAS_YAML if use_yaml is None else use_yaml and HAS_YAML):
        return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)
