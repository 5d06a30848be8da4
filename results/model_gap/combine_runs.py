"""One harness report from several runs of the same configuration: the cells of every input
JSON (a later file's cell replaces an earlier one of the same name: a cell run again after a
fix), summarised by the harness's own ``summarize`` (core/evaluation/harness.py). Used where
one configuration's ten cells came from more than one invocation (a cell rerun alone, a run
stopped to free the cores).

    scripts/env.sh python results/model_gap/combine_runs.py \\
        results/model_gap/harness_drake_wide10_seed2_clean_push_reseeded.json \\
        results/model_gap/harness_drake_wide0_seed2_clean_push_reseeded.json \\
        --out results/model_gap/harness_drake_seed2_clean_push_reseeded_combined.json

Prints one line per cell (nominal / identified / identified + randomisation on the cell) and
the summary's headline figures; the output JSON keeps the inputs' names under ``combined_from``.
"""
import argparse
import json
from pathlib import Path

from real2sim2real_ros.core.artifacts import atomic_write_json
from real2sim2real_ros.core.evaluation.harness import POLICIES, summarize


def combine(paths: list[Path]) -> dict:
    """{'combined_from', 'schema', 'task', 'trials', 'config', 'cells', 'summary',
    'failed_as_zero'}: the cells of ``paths`` by name, in the order first seen, later files
    winning."""
    cells: dict[str, dict] = {}
    first = None
    for p in paths:
        data = json.loads(p.read_text())
        first = first or data
        if data.get('task') != first.get('task') or data.get('trials') != first.get('trials'):
            raise SystemExit(f'{p}: task/trials {data.get("task")}/{data.get("trials")} differ '
                             f'from {paths[0]}: {first.get("task")}/{first.get("trials")}')
        for c in data['cells']:
            cells[c['name']] = c
    out = {k: first[k] for k in ('schema', 'task', 'trials', 'config') if k in first}
    out['combined_from'] = [str(p) for p in paths]
    out['cells'] = list(cells.values())
    out['summary'] = summarize(out['cells'])
    # The summary's means are over the completed cells; a failed cell gave the lab no
    # policy, so these count it as 0 (every policy).
    out['failed_as_zero'] = {
        f'cell_success_{n}': sum(c['policies'][n]['cell']['success_rate']
                                 for c in out['cells'] if 'error' not in c) / len(out['cells'])
        for n in POLICIES}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('json', nargs='+', type=Path, help='harness JSONs, later ones win')
    ap.add_argument('--out', type=Path, required=True, help='combined JSON')
    args = ap.parse_args()
    out = combine(args.json)
    for c in out['cells']:
        if 'error' in c:
            print(f'{c["name"]}: {c.get("reason")}')
            continue
        rates = ' / '.join(f'{c["policies"][n]["cell"]["success_rate"]:.1f}' for n in POLICIES)
        print(f'{c["name"]} (noise seed {c.get("noise_seed")}): {rates}')
    s = out['summary']
    keys = ['cells_completed', 'cells_failed'] + [f'cell_success_{n}' for n in POLICIES] + [
        'gain_points_identified_dr_vs_nominal', 'twin_prediction_error_mean_points',
        'object_heldout_pooled_ratio', 'object_heldout_criterion_passed',
        'object_heldout_criterion_cells']
    print(json.dumps({k: s.get(k) for k in keys}))
    print('failed cells as 0:', json.dumps(out['failed_as_zero']))
    atomic_write_json(args.out, out)


if __name__ == '__main__':
    main()
