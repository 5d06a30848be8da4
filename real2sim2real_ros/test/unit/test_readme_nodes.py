"""The README's node table against docs/nodes.md (generated from the running graph by
``r2s2r describe``, which test_cell_integration keeps equal to it): every node the README
lists exists, every ``~/`` service or action it names is that node's, every key parameter
it names is one the node declares. The README is a summary; this keeps it true."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _sections():
    text = (ROOT / 'docs' / 'nodes.md').read_text()
    parts = re.split(r'^## `(/[^`]+)`\s*$', text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def _readme_rows():
    text = (ROOT / 'README.md').read_text()
    block = text.split('## Nodes', 1)[1].split('\n## ', 1)[0]
    rows = []
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        m = re.fullmatch(r'`([a-z_]+)`', cells[0]) if len(cells) == 4 else None
        if m:
            rows.append((m.group(1), cells[2], cells[3]))
    return rows


def _outside_parens(cell: str) -> str:
    while True:
        stripped = re.sub(r'\([^()]*\)', '', cell)
        if stripped == cell:
            return cell
        cell = stripped


def test_readme_lists_every_node_of_the_reference():
    names = {f'/{n}' for n, _, _ in _readme_rows()}
    documented = {n for n in _sections() if not n.endswith('_state_listener')}
    assert len(names) >= 9
    assert names == documented, (sorted(names ^ documented))


def test_readme_interfaces_and_key_parameters_are_the_nodes_own():
    sections = _sections()
    problems = []
    for node, interfaces, params in _readme_rows():
        section = sections[f'/{node}']
        for rel in re.findall(r'`~/([a-z_]+)`', interfaces):
            if f'`/{node}/{rel}`' not in section:
                problems.append(f'{node}: ~/{rel} is not among its interfaces')
        declared = set(re.findall(r'^\| `([A-Za-z0-9_.]+)` \|', section, flags=re.M))
        for name in re.findall(r'`([A-Za-z0-9_.*]+)`', _outside_parens(params)):
            ok = (any(d.startswith(name[:-1]) for d in declared) if name.endswith('*')
                  else name in declared)
            if not ok:
                problems.append(f'{node}: key parameter {name!r} is not declared')
    assert not problems, problems
