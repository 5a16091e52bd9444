# Tollgate — `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
NPM_INSTALL := npm install --no-audit --no-fund

.PHONY: help install build dashboard browser services generate checkgenerate lint format typecheck audit test test-only run clean contracts bench bench-report

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

node_modules/.package-lock.json: package.json package-lock.json
	$(NPM_INSTALL)
	@touch $@

install: node_modules/.package-lock.json ## Install dependencies from the lockfile (builds better-sqlite3 from source)

build: install ## Bundle the dashboard and compile TypeScript to dist/ (scripts/build.mjs: the one build, as npm run build)
	node scripts/build.mjs

dashboard: install ## Bundle only the dashboard page into dist/dashboard (esbuild; no CDN at run time)
	node scripts/build.mjs dashboard

browser: ## Install Debian's chromium for the browser tests when it is missing (needs root and apt)
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

services: ## Install Debian's redis-server, PostgreSQL 15 and PgBouncer for the several-hosts tests when missing (needs root and apt; the tests start their own servers)
	@command -v redis-server >/dev/null && test -x /usr/lib/postgresql/15/bin/initdb && test -x /usr/sbin/pgbouncer || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server postgresql pgbouncer >/dev/null; }

generate: install ## Regenerate src/gen from proto/ with buf + protoc-gen-es
	buf generate

checkgenerate: generate ## Fail when regeneration changes src/gen (generated code is committed)
	@test -z "$$(git status --porcelain -- src/gen)" || { git status --porcelain -- src/gen; echo "src/gen is stale: run 'make generate' and commit"; exit 1; }

lint: install ## buf lint, Biome (format + lint)
	buf lint
	biome ci .

format: install ## Format the sources in place
	biome format --write .

typecheck: install ## tsc --noEmit over src, test and bench, and the dashboard with the DOM types
	tsc --noEmit
	tsc -p src/dashboard

audit: install ## npm audit --omit=dev; a finding fails unless audit-allowlist.json names it with a reason (see docs/reliability.md)
	node scripts/audit-deps.mjs

test: install checkgenerate lint typecheck audit build browser services ## Everything CI checks: generation, lint, types, the dependency audit, then all tests
	vitest run

test-only: build browser services ## Only the tests (skips generation and lint checks)
	vitest run

run: build ## Run the gateway on its embedded defaults and local stand-ins (tollgate dev: facade :8787, core :8788, ./data)
	node dist/src/cli/main.js dev

bench: build ## Benchmarks: gateway vs pass-through vs direct vs Portkey (installed from npm into a temp folder), writes bench/results/ and docs/benchmarks.md (~15 min; BENCH_ARGS=--quick)
	tsc -p tsconfig.bench.json
	ulimit -n "$$(ulimit -Hn)"; node dist/bench/run.js $(BENCH_ARGS)

bench-report: build ## Re-render docs/benchmarks.md from bench/results/latest.json
	tsc -p tsconfig.bench.json
	node dist/bench/report.js

clean: ## Remove build output (keeps ./data)
	rm -rf dist

contracts: install ## Recompile the dev chains' test stablecoin (contracts/*.sol) into src/dev/chains/evm/test-stablecoin-artifact.ts
	node scripts/compile-test-token.mjs
	biome format --write src/dev/chains/evm/test-stablecoin-artifact.ts
