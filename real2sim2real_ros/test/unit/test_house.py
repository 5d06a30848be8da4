"""House rules that keep the node shells readable (issue: "A house a newcomer can work in").

Node files stay under 500 lines and node functions under 50. The files and functions listed
below are over today and are being split; the lists may only shrink: a new file or function
over the limit fails, and so does a listed one that is back under it (take it off the list).
"""
import ast
from pathlib import Path

NODES = Path(__file__).resolve().parents[2] / 'real2sim2real_ros' / 'nodes'
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 50
LONG_FILES: set[str] = set()
LONG_FUNCTIONS: dict[str, set[str]] = {}


def _files():
    return sorted(f for f in NODES.rglob('*.py') if f.name != '__init__.py')


def test_node_files_stay_short():
    long = {str(f.relative_to(NODES)) for f in _files()
            if len(f.read_text().splitlines()) > MAX_FILE_LINES}
    assert long - LONG_FILES == set(), f'node files over {MAX_FILE_LINES} lines'
    assert LONG_FILES - long == set(), 'now short enough: take them off LONG_FILES'


def test_node_functions_stay_short():
    found = {}
    for f in _files():
        tree = ast.parse(f.read_text())
        names = {n.name for n in ast.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES}
        if names:
            found[str(f.relative_to(NODES))] = names
    assert found == LONG_FUNCTIONS, (
        f'node functions over {MAX_FUNCTION_LINES} lines (new ones must be split; listed '
        f'ones that are short now come off LONG_FUNCTIONS): {found}')
