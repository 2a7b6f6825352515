"""One set of store settings, translated for each engine (pipelines.storage). Pure: GCS
has no emulator here, so its translation is tested only this way."""

from __future__ import annotations

import logging

import pytest

from pipelines import storage
from pipelines.lake import Lake

MINIO = {"aws_endpoint_url": "http://127.0.0.1:9000", "aws_allow_http": "true"}


@pytest.mark.parametrize("uri, kind", [
    ("s3://b/lake", "s3"), ("s3a://b/lake", "s3"), ("az://c/lake", "azure"),
    ("abfss://c@acct.dfs.core.windows.net/lake", "azure"), ("gs://b/lake", "gcs"),
    ("/Volumes/main/cdc/lake", None), ("/tmp/lake", None)])
def test_the_store_follows_from_the_url(uri, kind):
    assert storage.store_kind(uri) == kind
    assert Lake.of(uri).is_local is (kind is None)


def test_table_locations_carry_the_url_and_the_options_delta_rs_needs():
    lake = Lake.of("s3://bucket/prefix/", MINIO)
    assert lake.root == "s3://bucket/prefix"
    table = lake.silver("sales", "orders")
    assert table.uri == "s3://bucket/prefix/silver/sales/orders"
    assert table.delta_options == {**MINIO, "aws_conditional_put": "etag"}
    assert lake.tombstones("public", "users").uri == \
        "s3://bucket/prefix/_state/silver_tombstones/public/users"
    assert Lake.of("/tmp/lake").bronze_changes.delta_options is None  # delta-rs defaults


def test_sail_gets_the_settings_as_object_store_environment_variables():
    assert storage.sail_environment("s3", MINIO) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true"}
    assert storage.sail_environment(None, MINIO) == {}


def test_classic_spark_reaches_s3_through_s3a_under_both_schemes():
    conf = storage.hadoop_conf("s3", MINIO, {"AWS_REGION": "eu-west-1",
                                             "AWS_SECRET_ACCESS_KEY": "never-copied"})
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert "never-copied" not in conf.values()  # S3A's own provider chain reads AWS_*
    assert storage.spark_packages("s3") == ["org.apache.hadoop:hadoop-aws:3.4.1"]


def test_classic_spark_reaches_gcs_with_the_connector_and_a_key_file():
    conf = storage.hadoop_conf("gcs", {}, {"GOOGLE_APPLICATION_CREDENTIALS": "/etc/key.json"})
    assert conf["spark.hadoop.fs.gs.impl"] == \
        "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem"
    assert conf["spark.hadoop.google.cloud.auth.service.account.json.keyfile"] == "/etc/key.json"
    assert storage.hadoop_conf("gcs", {}, {}).get(
        "spark.hadoop.google.cloud.auth.type") is None  # application default credentials
    assert storage.spark_packages("gcs") == [storage.GCS_CONNECTOR]


def test_classic_spark_reaches_adls_with_a_key_or_a_service_principal():
    key = storage.hadoop_conf("azure", {}, {"AZURE_STORAGE_ACCOUNT_NAME": "acct",
                                            "AZURE_STORAGE_ACCOUNT_KEY": "k"})
    assert key == {"spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": "k"}
    principal = storage.hadoop_conf("azure", {"azure_storage_account_name": "acct"}, {
        "AZURE_CLIENT_ID": "id", "AZURE_TENANT_ID": "t", "AZURE_CLIENT_SECRET": "s"})
    host = "acct.dfs.core.windows.net"
    assert principal[f"spark.hadoop.fs.azure.account.auth.type.{host}"] == "OAuth"
    assert principal[f"spark.hadoop.fs.azure.account.oauth2.client.endpoint.{host}"] == \
        "https://login.microsoftonline.com/t/oauth2/token"
    assert storage.hadoop_conf("azure", {}, {}) == {}  # the cluster's managed identity


def test_secrets_are_redacted_from_text_and_log_records(monkeypatch, caplog):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    assert storage.redact("signature for s3cr3t-value failed") == "signature for *** failed"
    logger = logging.getLogger("test_storage")
    logger.addFilter(storage.RedactSecrets())
    with caplog.at_level(logging.INFO):
        logger.info("request with %s", "s3cr3t-value")
    assert "s3cr3t-value" not in caplog.text and "request with ***" in caplog.text
