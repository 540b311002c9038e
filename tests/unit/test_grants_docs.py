"""Each connector page's grants table is the connector's own list of grants (one place, read by docs and tests)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eosink.connectors.delta import grants as delta_grants
from eosink.connectors.hdfs import HdfsConfig
from eosink.connectors.hdfs.grants import permissions_table, writer_permissions
from eosink.connectors.kafka.grants import acls_table, documented_acls
from eosink.connectors.postgres.grants import documented_grants, grants_table
from eosink.connectors.s3.grants import actions_table

DOCS = Path(__file__).resolve().parents[2] / "docs" / "connectors"
TABLES = {
    "postgres": lambda: grants_table(documented_grants()),
    "kafka": lambda: acls_table(documented_acls()),
    "s3": actions_table,
    "hdfs": lambda: permissions_table(writer_permissions(HdfsConfig("hdfs://namenode:8020/data/events"), "writer")),
    "delta-s3": delta_grants.actions_table,
    "delta-hdfs": delta_grants.permissions_table,
}
PAGE = {"delta-s3": "delta", "delta-hdfs": "delta"}


@pytest.mark.parametrize("sink", list(TABLES))
def test_the_grants_table_in_the_docs_is_the_connectors_list(sink: str) -> None:
    page = PAGE.get(sink, sink)
    text = (DOCS / f"{page}.md").read_text()
    found = re.search(rf"<!-- grants:{sink} -->\n(.*?)\n<!-- /grants:{sink} -->", text, re.DOTALL)
    assert found, f"docs/connectors/{page}.md has no <!-- grants:{sink} --> table"
    assert found.group(1) == TABLES[sink](), f"regenerate the table in docs/connectors/{page}.md from its grants"
