# real2sim2real_ros: the two commands are `make demo` and `make test`; both set up first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := scripts/env.sh

.PHONY: help setup test lint demo demo-quick bench clean

help:
	@echo "make setup   venv with pinned ROS 2 Kilted wheels + stack, colcon build (idempotent)"
	@echo "make test    lint + every test (unit, launch, multi-process DDS integration)"
	@echo "make demo    the whole loop on the emulated cell (capture .. train .. execute .. evaluate)"
	@echo "             CELL=drake_default (a shipped cell's name or a cell spec path) picks the cell"
	@echo "make demo-quick  bring up the graph and execute one trajectory (under a minute)"
	@echo "make bench   speed and accuracy figures (printed; see README results table)"

setup:
	@bash scripts/setup.sh

lint: setup
	@$(ENV) bash scripts/lint.sh

test: setup
	@$(ENV) bash scripts/lint.sh
	@$(ENV) python -m pytest real2sim2real_ros/test

demo: setup
	@$(ENV) python -m real2sim2real_ros.demo $(if $(CELL),--cell-spec "$(CELL)")

demo-quick: setup
	@$(ENV) python -m real2sim2real_ros.demo_quick

bench: setup
	@$(ENV) python -m real2sim2real_ros.bench

clean:
	rm -rf build install log
