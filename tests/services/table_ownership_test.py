#!/usr/bin/env python3
"""Each service reads and writes only its own tables (docs/architecture.md, "Who owns which table").

Reads the SQL of every source file under services/<dir>/ and fails when a statement names a
table another service owns after FROM, JOIN, INTO, UPDATE, REFERENCES or TABLE. Only string
literals are read (comments and C++ identifiers are not SQL), adjacent literals are joined as
the compiler joins them, and keywords count only in capitals, as every store writes them.

Also checks that every table common/schema.cc creates has exactly one owner, so a new table is
given one when it is made.

usage: table_ownership_test.py [SOURCE_DIR]   (default: the checkout holding this file)
       table_ownership_test.py --self-test    (the checker's own cases)
"""

import pathlib
import re
import sys

# Who owns which table. A service's store is the only code that names its tables in SQL; other
# services ask it through an interface.
OWNERS = {
    "accounts": {"workspaces", "api_keys", "api_key_grants", "credit_ledger"},
    "agents": {"agents", "languages", "scenarios", "integration_settings"},
    "calls": {
        "calls",
        "call_metrics",
        "call_figures",
        "call_latency_bins",
        "call_waveforms",
        "agent_hourly_calls",
        "agent_hourly_latency",
        "agent_hourly_outcomes",
        "alert_rules",
        "alert_deliveries",
        "alert_delivery_attempts",
    },
    "metrics": {"metrics", "metric_agents", "metric_scenarios"},
    "runs": {"runs", "batch_runs"},
}

# Source directories and the service each belongs to. Directories that own no table (judges,
# scoring) may name none in SQL.
SERVICE_OF_DIR = {
    "accounts": "accounts",
    "agents": "agents",
    "calls": "calls",
    "metrics": "metrics",
    "runs": "runs",
    "judges": None,
    "scoring": None,
}

# Known crossings still being moved, as (file, table). Each entry is a debt with an owner: the
# entry goes when its SQL moves behind the owning service's interface, and the test fails when
# an entry no longer matches anything, so the list only shrinks.
ALLOWED = set()  # none left: scenarios ask the metrics service, runs ask the agents service

KEYWORD = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|REFERENCES|TABLE)\s+((?:IF\s+(?:NOT\s+)?EXISTS\s+)?)")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# After a table of a FROM list: an optional alias, then a comma and the next table.
ALIAS_THEN_COMMA = re.compile(r"\s*(?:AS\s+)?(?:(?!ON\b|WHERE\b|JOIN\b)[a-z_][a-z0-9_]*)?\s*,\s*")


def string_literals(source):
    """The string literals of C++ `source`, adjacent ones joined, comments skipped."""
    literals = []
    current = None  # the literal being joined, while only whitespace and comments follow it
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if source.startswith("//", i):
            i = source.find("\n", i)
            i = n if i < 0 else i
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch == "'":
            # A character literal ('"' must not open a string); also digit separators (1'000).
            j = i + 1
            while j < n and source[j] != "'" and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            i = j + 1
        elif ch == '"' or (ch == "R" and source.startswith('R"', i) and
                           (i == 0 or not (source[i - 1].isalnum() or source[i - 1] == "_"))):
            if ch == "R":
                open_paren = source.index("(", i + 2)
                delimiter = source[i + 2:open_paren]
                close = source.index(")" + delimiter + '"', open_paren)
                text = source[open_paren + 1:close]
                i = close + len(delimiter) + 2
            else:
                j = i + 1
                chars = []
                while source[j] != '"':
                    if source[j] == "\\":
                        chars.append(source[j:j + 2])
                        j += 2
                    else:
                        chars.append(source[j])
                        j += 1
                text = "".join(chars)
                i = j + 1
            current = text if current is None else current + text
        elif ch.isspace():
            i += 1
        else:
            if current is not None:
                literals.append(current)
                current = None
            i += 1
    if current is not None:
        literals.append(current)
    return literals


def tables_named(sql):
    """Every table `sql` names after FROM, JOIN, INTO, UPDATE, REFERENCES or TABLE."""
    names = []
    for match in KEYWORD.finditer(sql):
        pos = match.end()
        while True:
            ident = IDENTIFIER.match(sql, pos)
            if not ident:
                break
            names.append(ident.group(0))
            # FROM a x, b y: a comma list of tables (only after FROM).
            if not sql[match.start():].startswith("FROM"):
                break
            comma = ALIAS_THEN_COMMA.match(sql, ident.end())
            if not comma:
                break
            pos = comma.end()
    return names


def owner_of(table):
    for service, tables in OWNERS.items():
        if table in tables:
            return service
    return None


def crossings(root):
    """(file, table, owner) for every table a service's source names and another owns."""
    found = []
    for directory, service in sorted(SERVICE_OF_DIR.items()):
        for path in sorted((root / "services" / directory).glob("*")):
            if path.suffix not in (".cc", ".h"):
                continue
            relative = path.relative_to(root).as_posix()
            for literal in string_literals(path.read_text()):
                for table in tables_named(literal):
                    owner = owner_of(table)
                    if owner is not None and owner != service:
                        found.append((relative, table, owner))
    return found


def schema_tables(root):
    """The tables common/schema.cc leaves once every migration has run."""
    schema = (root / "common" / "schema.cc").read_text()
    tables = set()
    statement = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?([a-z_][a-z0-9_]*)|"
                           r"DROP TABLE (?:IF EXISTS )?([a-z_][a-z0-9_]*)|"
                           r"ALTER TABLE ([a-z_][a-z0-9_]*) RENAME TO ([a-z_][a-z0-9_]*)")
    for created, dropped, renamed, new_name in statement.findall(schema):
        if created:
            tables.add(created)
        elif dropped:
            tables.discard(dropped)
        else:
            tables.discard(renamed)
            tables.add(new_name)
    return tables


def check(root):
    problems = []
    found = crossings(root)
    for relative, table, owner in sorted(set(found)):
        if (relative, table) not in ALLOWED:
            problems.append(f"{relative} names table {table} in SQL, which {owner} owns: ask the "
                            f"{owner} service through an interface")
    used = {(relative, table) for relative, table, _ in found}
    for relative, table in sorted(ALLOWED - used):
        problems.append(f"{relative} no longer names {table}: remove it from ALLOWED")

    owned = [t for tables in OWNERS.values() for t in tables]
    for table in sorted(schema_tables(root)):
        if owned.count(table) != 1:
            problems.append(f"table {table} (common/schema.cc) has {owned.count(table)} owners "
                            "in OWNERS: give it exactly one (and say so in docs/architecture.md)")
    return problems


def self_test():
    cases = [
        # (C++ source, tables it names in SQL)
        ('c.Prepare("SELECT 1 FROM agents WHERE id = ?")', ["agents"]),
        ('c.Prepare("SELECT s.agent_id FROM "\n  "scenarios s JOIN agents a ON a.id = s.agent_id")',
         ["scenarios", "agents"]),
        ('c.Prepare("SELECT 1 FROM " /* why */ "metrics")', ["metrics"]),
        ('Exec(R"sql(DELETE FROM metric_agents WHERE agent_id = ?)sql")', ["metric_agents"]),
        ('"INSERT INTO credit_ledger (a) VALUES (?)"', ["credit_ledger"]),
        ('"UPDATE workspaces SET credit_balance = 1"', ["workspaces"]),
        ('"SELECT a.x FROM calls a, agents b WHERE a.agent_id = b.id"', ["calls", "agents"]),
        ('"agent_id INTEGER REFERENCES agents(id)"', ["agents"]),
        # Comments and identifiers are not SQL; keywords count in capitals only.
        ("// SELECT 1 FROM agents\nint x = 0;", []),
        ("/* UPDATE workspaces */ agents_->Get(1, 2);", []),
        ('"the agent is gone from agents"', []),
        ("char q = '\"'; int y = 1; // FROM agents\n", []),
        ('"FROM " + kTable', []),
    ]
    failures = []
    for source, expected in cases:
        got = [t for literal in string_literals(source) for t in tables_named(literal)]
        if got != expected:
            failures.append(f"{source!r}: {got} != {expected}")
    return failures


def main():
    if sys.argv[1:] == ["--self-test"]:
        failures = self_test()
        print("\n".join(failures) or "ok")
        return 1 if failures else 0
    failures = self_test()
    if failures:
        print("the checker itself is wrong:\n" + "\n".join(failures))
        return 1
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2])
    problems = check(root)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"ok: {len(schema_tables(root))} tables, each named in SQL only by its owner "
          f"({len(ALLOWED)} allowed crossings left)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
