"""Where an end-to-end test keeps the service's database, and how it reads it back.

SQLite in the data dir by default. With TEST_POSTGRES (the tests/support test_postgres tool)
and CALLEVAL_TEST_POSTGRES_DIR set, a new database on the test PostgreSQL server instead, given
to every `calleval serve` of the test with --database-url, and read back with psql.
"""
import os
import sqlite3
import subprocess

TEST_POSTGRES = os.environ.get("TEST_POSTGRES")


class TestDatabase:
    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.url = None
        if TEST_POSTGRES:
            self.url = subprocess.run(
                [TEST_POSTGRES, "newdb", os.environ["CALLEVAL_TEST_POSTGRES_DIR"]],
                check=True, capture_output=True, text=True).stdout.strip()

    @property
    def backend(self):
        return "postgres" if self.url else "sqlite"

    def flags(self):
        """What `calleval serve` is given: nothing for SQLite in the data dir."""
        return ["--database-url", self.url] if self.url else []

    def rows(self, sql):
        """The rows of a query without parameters, integer columns as ints."""
        if not self.url:
            db = sqlite3.connect(os.path.join(self.data_dir, "calleval.db"))
            try:
                return db.execute(sql).fetchall()
            finally:
                db.close()
        out = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-F", "\t", "-v",
                              "ON_ERROR_STOP=1", "-d", self.url, "-c", sql],
                             check=True, capture_output=True, text=True).stdout

        def value(text):
            try:
                return int(text)
            except ValueError:
                return None if text == "" else text
        return [tuple(value(v) for v in line.split("\t")) for line in out.splitlines() if line]
