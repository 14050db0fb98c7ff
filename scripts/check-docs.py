#!/usr/bin/env python3
"""Checks that the documentation names only what exists, and documents what exists.

Usage: check-docs.py --server target/debug/ticketing-server

Read: README.md, CONTRIBUTING.md and docs/*.md ("the docs"). Checked:

  flags      every `--flag` in the docs is a flag of one of the project's
             programs (the server, its gen-certs, the `ticketing` CLI,
             ticketing-bench, ticketing-verify, ticketing-sim, the ticket-sale demo and its
             sellers: each one's --help) or of a tool the docs tell you to
             run (cargo, npm, pip, ...: EXTERNAL_FLAGS below); every flag of
             the configuration page's tables is a server flag; and every
             server flag in `ticketing-server --help` is on the configuration page.
  env        every TICKETING_* variable in the docs is in a --help above or
             in the project's code (not only in the docs).
  metrics    every ticketing_* metric name in the docs is served by /metrics
             (scraped from a started standalone server; the cluster-only
             ticketing_raft_* metrics come from metrics.rs), and every
             served metric is on docs/metrics.md.
  errors     every `E <code>` in the docs is an ErrorCode of ticketing-proto,
             and every code is in docs/protocol.md or docs/cluster-protocol.md.
  citations  every `docs/FILE.md, "Section"` and `docs/FILE.md §N` in the
             code names a page that exists and a heading on it.
  links      every relative link of README.md and CONTRIBUTING.md names a file
             that exists, and each #anchor into a page a heading of it.
  snippets   in README.md and every docs page, every fenced code block is
             marked: `<!-- tested: FILE -->` on the line before it (a README
             block must then be exactly FILE, which scripts/test-doc-examples
             runs) or `<!-- excerpt -->`; output blocks are ```text.

The checks below read "the user pages": the docs above, examples/README.md,
the bindings' READMEs (they ship in the packages) and deploy/server-README.md
(it ships in the server tarball):

  sections   every relative link resolves, and so does its #anchor (mdBook's
             heading ids); every `FILE.md, "Section"` citation names a
             heading of FILE exactly (or a heading that starts with it and
             goes on with ":" or " ("); every `"Section" below/above` one of
             the same page; every `FILE.md §N` a numbered heading; and every
             `docs/FILE.md#anchor` in the code a heading.
  figures    every benchmark figure quoted outside the report (a ratio `N×`,
             a failover time in seconds, and a rate in pairs/s, hand-overs/s
             or grants/s where its paragraph names the benchmark) is a figure
             of BENCHMARKS.md, rounded at most to the digits quoted. docs/benchmark-report.md (BENCHMARKS.md itself)
             and the appendices of earlier runs (HISTORY_PAGES) are exempt.
  durable    a paragraph that says the state is in memory only or is lost on
             a restart also names durable mode (`--data-dir`).
  indeterminate  no paragraph says an Indeterminate grant returns at its
             lease end without the client's 5 s release window.
  team-speak no phrase of TEAM_SPEAK (how the project is run, not how it is
             used: "this round", "gap (1)", "Decision 11", "the test machine").
  registries every `pip install`, `gem install` and `npm i`/`npm install` of
             the package `ticketing`, and every version pin of it, names where
             it comes from (a file, an index, a source or a registry): the
             public registries' `ticketing` is another project.
  install    README.md and every language page link docs/install.md before
             any other page in their install section.
  exit codes every exit code of the `ticketing` CLI (its `mod code`) and of
             ticketing-server (ExitCode::from, the EXIT_* constants, the data
             dir's exit_code, ExitCode::FAILURE, clap's usage error 2) is in
             docs/errors.md.

--static-only runs only the checks that need no built program (everything
but flags, env and metrics): about a second, no server binary needed.

Prints one line per problem and "claims: N checks, M problems"; exit 1 on a problem.

The parts (scripts/checkdocs/): pages.py reads the pages and the code;
programs.py the flags, env and metrics checks; repo.py error codes,
citations and snippets; truth.py the user pages' claims; report.py the tally.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkdocs import report  # noqa: E402
from checkdocs.pages import ROOT, code_text, docs  # noqa: E402
from checkdocs.programs import program_checks  # noqa: E402
from checkdocs.repo import check_citations, check_error_codes, check_snippets  # noqa: E402
from checkdocs.truth import static_checks  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=os.path.join(ROOT, "target", "debug", "ticketing-server"))
    ap.add_argument("--static-only", action="store_true",
                    help="only the checks that need no built program (not flags, env, metrics)")
    args = ap.parse_args()
    pages = docs()
    code = code_text()
    if not args.static_only:
        program_checks(os.path.abspath(args.server), pages, code)
    check_error_codes(pages)
    check_citations(pages, code)
    check_snippets(pages)
    static_checks(code)

    for p in report.problems:
        print(p)
    print(f"claims: {report.counted[0]} checks, {len(report.problems)} problems")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
