"""make setup's uv install reads pip's own settings (scripts/uv_args.py): every index, link
folder and constraint file pip would use, from every scope, reaches uv as its option."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location('uv_args', REPO / 'scripts' / 'uv_args.py')
uv_args = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_args)

PIP_CONFIG_LIST = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'
global.find-links='/opt/wheels'
user.index-url='https://mirror.example/simple'
site.timeout='60'
"""


def test_every_setting_pip_would_use_reaches_uv_once():
    settings = uv_args.pip_settings(PIP_CONFIG_LIST)
    assert settings == {
        'find-links': ['/opt/wheels'],
        'constraint': ['/etc/xdg/pip/constraints.txt'],
        'extra-index-url': ['file:///opt/a/simple', 'file:///opt/b/simple'],
        'index-url': ['https://mirror.example/simple'],
    }
    args = uv_args.uv_args(settings)
    assert args[:2] == ['--index-strategy', 'unsafe-best-match']
    pairs = list(zip(args[2::2], args[3::2]))
    assert pairs == [('--index-url', 'https://mirror.example/simple'),
                     ('--extra-index-url', 'file:///opt/a/simple'),
                     ('--extra-index-url', 'file:///opt/b/simple'),
                     ('--find-links', '/opt/wheels'),
                     ('--constraint', '/etc/xdg/pip/constraints.txt')]


def test_no_settings_gives_only_the_index_strategy():
    assert uv_args.uv_args(uv_args.pip_settings('')) == ['--index-strategy', 'unsafe-best-match']
