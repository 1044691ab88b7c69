"""The blocks of docs/ that a bench script writes (--doc FILE#ID): what stands between
'<!-- TOOL:ID -->' and '<!-- /TOOL:ID -->' in a page, replaced by a run's tables. Used by
compare.sh, torch_bench.py, swarm_report.py and the reports of the emulated-cluster benches.

    python3 bench/doc_block.py check TOOL FILE#ID   # exits 1 naming what is missing (before a long run)
"""
import sys


def size_name(b):
    """A size column's cell: bytes in the largest binary unit that divides them ("64 KiB")."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def markers(tool, name):
    return f"<!-- {tool}:{name} -->", f"<!-- /{tool}:{name} -->"


def split(tool, spec):
    """FILE#ID -> (FILE, ID)."""
    path, sep, name = spec.partition("#")
    if not sep or not path or not name:
        sys.exit(f"{tool}: --doc takes FILE#ID, not '{spec}'")
    return path, name


def check(path, tool, name):
    """Exits naming the page and the markers unless the page holds each marker line once, in order."""
    begin, end = markers(tool, name)
    try:
        text = open(path).read()
    except OSError as e:
        sys.exit(f"{tool}: --doc: {e}")
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        sys.exit(f"{tool}: --doc: {path} needs one '{begin}' line before one '{end}' line")
    return text


def replace(path, tool, name, body):
    """Writes `body` between the block's markers in the page at `path`."""
    text = check(path, tool, name)
    begin, end = markers(tool, name)
    text = text[:text.index(begin) + len(begin)] + "\n" + body.strip("\n") + "\n" + text[text.index(end):]
    with open(path, "w") as f:
        f.write(text)


def add_argument(parser, tool):
    parser.add_argument("--doc", metavar="FILE#ID",
                        help=f"also write the report between '<!-- {tool}:ID -->' and '<!-- /{tool}:ID -->' of FILE")


def write(spec, tool, report):
    """A report (markdown whose first line is its '# title') into the block of --doc FILE#ID: the
    title becomes the block's first line in bold, under the page's own headings."""
    path, name = split(tool, spec)
    lines = report.strip("\n").split("\n")
    if lines and lines[0].startswith("# "):
        lines[0] = f"**{lines[0][2:]}**"
    replace(path, tool, name, "\n".join(lines))
    print(f"{tool}: rewrote {name} in {path}", file=sys.stderr)


def publish(out, report, spec, tool):
    """A report's usual ends: OUT/report.md, standard output, and the block of --doc FILE#ID when
    `spec` is given."""
    with open(f"{out}/report.md", "w") as f:
        f.write(report)
    print(report, end="")
    if spec:
        write(spec, tool, report)


def pyplot():
    """matplotlib's pyplot without a display, or None where matplotlib is missing (the reports
    then write their tables only)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, img=None):
    """A report's plot: laid out, written to `path` and, for --doc's --img, beside the page."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    if img:
        fig.savefig(img, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "check":
        sys.exit(__doc__)
    tool = sys.argv[2]
    path, name = split(tool, sys.argv[3])
    check(path, tool, name)
