"""The corpus and its documentation agree: every program of
test_corpus_*.py has its row in docs/compatibility.md ("Real programs"), the
row's result says what the test expects (accelerated, falls back, or not
supported for a strict xfail), and the corpus has at least 40 programs."""
import re

from corpus import ACCELERATED, REPO

import test_corpus_built
import test_corpus_debian
import test_corpus_npm
import test_corpus_pypi

MODULES = (test_corpus_debian, test_corpus_pypi, test_corpus_npm, test_corpus_built)


def corpus_rows():
    text = (REPO / "docs" / "compatibility.md").read_text()
    m = re.search(r"^## Real programs \(the corpus\)\n(.*?)^## ", text, re.S | re.M)
    assert m, "docs/compatibility.md has no section 'Real programs (the corpus)'"
    rows = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 5 and cells[0] not in ("program", "---"):
            rows[cells[0]] = cells
    return rows


def test_every_program_has_its_row():
    rows = corpus_rows()
    programs = [p for m in MODULES for p in m.PROGRAMS]
    names = [p.name for p in programs]
    assert len(names) == len(set(names)), "two programs of one name"
    assert len(programs) >= 40, "the corpus has %d programs" % len(programs)
    for p in programs:
        assert p.name in rows, "no row for %r in docs/compatibility.md" % p.name
        result = rows[p.name][4]
        if p.xfail:
            assert result.startswith("not supported"), (p.name, result)
        elif p.expect == ACCELERATED:
            assert result.startswith("accelerated"), (p.name, result)
        else:
            assert result.startswith("falls back"), (p.name, result)
        module = p.fn.__module__ + ".py"
        assert module in rows[p.name][3], "the row of %r does not name %s" % (p.name, module)
    # and no row for a program the corpus does not have (gRPC and sshd have tests elsewhere)
    extra = set(rows) - set(names) - {"gRPC (grpcio)", "OpenSSH sshd"}
    assert not extra, "rows without a program: %s" % sorted(extra)
