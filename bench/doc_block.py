"""The blocks of docs/ that a bench script writes (--doc): what stands between
'<!-- TOOL:NAME -->' and '<!-- /TOOL:NAME -->' in a page, replaced by a run's tables.
Used by torch_bench.py and swarm_report.py."""
import sys


def markers(tool, name):
    return f"<!-- {tool}:{name} -->", f"<!-- /{tool}:{name} -->"


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
    text = text[:text.index(begin) + len(begin)] + "\n" + body + "\n" + text[text.index(end):]
    with open(path, "w") as f:
        f.write(text)
