"""How each engine reaches the lake's store: one set of settings, translated here.

The user writes the lake's URL and `lake.storage_options` in delta-rs/object_store
names (`aws_endpoint_url`, `azure_storage_use_emulator`, ...). Credentials never sit in
the config: every engine takes them from its cloud SDK's standard environment variables
or the platform (instance profile, managed identity, Databricks credential vending).
This module turns the one set into delta-rs storage options, obstore's config, the
environment the embedded Sail engine reads and classic Spark's Hadoop configuration.
It is pure but for `object_store` and `secret_values`, which read the environment.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from pipelines.errors import ConfigError

if TYPE_CHECKING:
    from obstore.store import ObjectStore

# URL scheme -> store. Local paths (and /Volumes/...) have no scheme.
SCHEMES = {"s3": "s3", "s3a": "s3", "az": "azure", "abfs": "azure", "abfss": "azure",
           "gs": "gcs"}
URL_FORMS = ("s3://bucket/prefix, az://container/prefix, "
             "abfss://container@account.dfs.core.windows.net/prefix, gs://bucket/prefix")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")

# Environment variables that hold credentials: never logged, never printed.
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY",
                    "AZURE_STORAGE_KEY", "AZURE_CLIENT_SECRET", "AZURE_STORAGE_SAS_KEY",
                    "AZURE_STORAGE_TOKEN", "GOOGLE_SERVICE_ACCOUNT_KEY")
# Option names that carry credentials: refused in the config file.
_SECRET_OPTION = re.compile(r"(secret|token|password|sas|_key$|access_key_id|account_key)")
# Options that give up the conditional commit a concurrent writer needs.
_UNSAFE_OPTIONS = {"aws_s3_allow_unsafe_rename": "it lets two writers overwrite each "
                   "other's commit"}

# object_store's HTTP client settings (ClientConfigKey), which delta-rs accepts among the
# store's options, with or without the store's prefix (aws_allow_http, allow_http).
_CLIENT_OPTIONS = {"allow_http", "allow_invalid_certificates", "connect_timeout",
                   "default_content_type", "http1_only", "http2_only", "pool_idle_timeout",
                   "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate",
                   "proxy_excludes", "timeout", "user_agent"}

GCS_CONNECTOR = "com.google.cloud.bigdataoss:gcs-connector:3.0.4"


def store_kind(uri: str) -> str | None:
    """"s3", "azure" or "gcs" for a store URL; None for a file system path."""
    match = _SCHEME.match(uri)
    return SCHEMES.get(match.group(1).lower()) if match else None


def check_lake_url(uri: str) -> None:
    """ConfigError unless `uri` is a file system path or a store URL this project reaches."""
    match = _SCHEME.match(uri)
    if match and len(match.group(1)) > 1 and match.group(1).lower() not in SCHEMES:
        raise ConfigError(f"lake.path: got {uri!r}; expected a file system path (a local "
                          "directory, or a Unity Catalog volume such as "
                          f"/Volumes/catalog/schema/lake) or an object store URL: {URL_FORMS}")
    if match and not re.match(r"^[^:]+://[^/]+", uri):
        raise ConfigError(f"lake.path: got {uri!r}; expected one of {URL_FORMS}")


def check_storage_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options, names in lower case; ConfigError for a credential or an unsafe
    setting."""
    for key, value in options.items():
        name = key.lower()
        if _SECRET_OPTION.search(name):
            raise ConfigError(
                f"lake.storage_options.{key}: credentials never go in the config file; set "
                "them in the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "AZURE_STORAGE_ACCOUNT_KEY or AZURE_CLIENT_SECRET, "
                "GOOGLE_APPLICATION_CREDENTIALS) or use the platform's identity "
                "(docs/storage.md)")
        if name in _UNSAFE_OPTIONS and _true(value):
            raise ConfigError(f"lake.storage_options.{key}: refused, {_UNSAFE_OPTIONS[name]}; "
                              "the lake needs a store with conditional writes (docs/storage.md)")
    return {key.lower(): value for key, value in options.items()}


def delta_rs_options(store: str | None, options: Mapping[str, str]) -> dict[str, str]:
    """delta-rs storage_options: the user's, plus S3's conditional-put commits.

    delta-rs commits a version by creating its log file only if it does not exist. On
    S3 that is If-None-Match (AWS S3 and MinIO have it), object_store's `etag` mode: its
    default today, set here so that a changed default cannot quietly give up the
    protection. Azure and GCS create-if-absent natively."""
    result = dict(options)
    if store == "s3":
        result.setdefault("aws_conditional_put", "etag")
    return result


def object_store(root: str, options: Mapping[str, str]) -> "ObjectStore":
    """An obstore store rooted at the lake (or a table) for the odd file operation;
    credentials from the environment like delta-rs."""
    from obstore.store import LocalStore, from_url

    store = store_kind(root)
    if store is None:
        return LocalStore(os.path.abspath(root), mkdir=True)
    config, client = {}, {}
    for key, value in options.items():
        name = re.sub(r"^(aws|azure|google)_", "", key)
        if name in _CLIENT_OPTIONS:  # HTTP client settings: obstore takes them apart
            client[name] = value
        else:
            config[key] = value
    return from_url(_object_store_url(root), config=config, client_options=client)


def _object_store_url(root: str) -> str:
    """obstore knows s3, az, abfss and gs; s3a is S3 under Hadoop's name."""
    return "s3://" + root[len("s3a://"):] if root.startswith("s3a://") else root


def sail_environment(store: str | None, options: Mapping[str, str]) -> dict[str, str]:
    """Environment variables for the embedded Sail engine, which reads a store's settings
    as object_store does: each option as its upper-case name (AWS_ENDPOINT_URL, ...)."""
    if store is None:
        return {}
    return {key.upper(): value for key, value in options.items()}


def hadoop_conf(store: str | None, options: Mapping[str, str],
                environ: Mapping[str, str]) -> dict[str, str]:
    """Spark properties that let classic Spark's Hadoop connectors reach the store.

    Credentials stay with the connector's own providers where it has them (S3A's chain
    reads AWS_* and instance profiles; GCS's application default credentials); ABFS has
    no environment provider, so the account key or client secret is copied from the
    environment into the session's configuration in memory, never into a file."""
    if store == "s3":
        conf = {"spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
                "spark.hadoop.fs.s3a.aws.credentials.provider":
                    "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"}
        endpoint = options.get("aws_endpoint_url") or options.get("aws_endpoint")
        if endpoint:
            conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
            conf["spark.hadoop.fs.s3a.path.style.access"] = str(
                not _true(options.get("aws_virtual_hosted_style_request", "false"))).lower()
            if endpoint.startswith("http://"):
                conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = "false"
        region = options.get("aws_region") or environ.get("AWS_REGION")
        if region:
            conf["spark.hadoop.fs.s3a.endpoint.region"] = region
        return conf
    if store == "azure":
        account = options.get("azure_storage_account_name") or environ.get(
            "AZURE_STORAGE_ACCOUNT_NAME", "")
        host = f"{account}.dfs.core.windows.net"
        key = environ.get("AZURE_STORAGE_ACCOUNT_KEY") or environ.get("AZURE_STORAGE_KEY")
        if key:
            return {f"spark.hadoop.fs.azure.account.key.{host}": key}
        if environ.get("AZURE_CLIENT_SECRET"):
            tenant = environ.get("AZURE_TENANT_ID", "")
            return {
                f"spark.hadoop.fs.azure.account.auth.type.{host}": "OAuth",
                f"spark.hadoop.fs.azure.account.oauth.provider.type.{host}":
                    "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
                f"spark.hadoop.fs.azure.account.oauth2.client.id.{host}":
                    environ.get("AZURE_CLIENT_ID", ""),
                f"spark.hadoop.fs.azure.account.oauth2.client.secret.{host}":
                    environ["AZURE_CLIENT_SECRET"],
                f"spark.hadoop.fs.azure.account.oauth2.client.endpoint.{host}":
                    f"https://login.microsoftonline.com/{tenant}/oauth2/token"}
        return {}  # a managed identity configured on the cluster
    if store == "gcs":
        conf = {"spark.hadoop.fs.gs.impl":
                    "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
                "spark.hadoop.fs.AbstractFileSystem.gs.impl":
                    "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS"}
        if environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
            conf["spark.hadoop.google.cloud.auth.type"] = "SERVICE_ACCOUNT_JSON_KEYFILE"
            conf["spark.hadoop.google.cloud.auth.service.account.json.keyfile"] = \
                environ["GOOGLE_APPLICATION_CREDENTIALS"]
        return conf
    return {}


def spark_packages(store: str | None) -> list[str]:
    """Maven coordinates of classic Spark's connector for the store (fetched by Ivy like
    delta-spark, and cached). Hadoop's connectors must match the Hadoop client the
    installed PySpark ships, which differs between Spark lines."""
    if store in ("s3", "azure"):
        return [f"org.apache.hadoop:hadoop-{'aws' if store == 's3' else 'azure'}:"
                f"{hadoop_version()}"]
    return [GCS_CONNECTOR] if store == "gcs" else []


def hadoop_version() -> str:
    """The version of the Hadoop client in the installed PySpark's jars."""
    spec = importlib.util.find_spec("pyspark")
    jars = (Path(spec.submodule_search_locations[0]) / "jars"
            if spec and spec.submodule_search_locations else None)
    found = sorted(jars.glob("hadoop-client-api-*.jar")) if jars else []
    if not found:
        raise ConfigError("classic Spark needs PySpark with its jars (pip install "
                          "'lakehouse-cdc[spark]'); found none to tell its Hadoop version")
    return found[0].name[len("hadoop-client-api-"):-len(".jar")]


def check_spark_url(uri: str) -> None:
    """ConfigError for a URL classic Spark's Hadoop connectors cannot open."""
    if uri.startswith("az://"):
        raise ConfigError(f"lake.path: got {uri!r}; classic Spark reaches Azure through "
                          "ABFS: use abfss://container@account.dfs.core.windows.net/prefix")


class RedactSecrets(logging.Filter):
    """Replaces the environment's credentials in every log record with ***: an error
    from a store's SDK may quote the request it failed on."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            if redact(text) != text:
                record.exc_info, record.exc_text = None, redact(text)
        return True


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The credentials in the environment, to keep them out of every message."""
    env = os.environ if environ is None else environ
    return [env[name] for name in SECRET_VARIABLES if len(env.get(name, "")) >= 4]


def redact(text: str, secrets: list[str] | None = None) -> str:
    """`text` with every credential of the environment replaced by ***."""
    for secret in secret_values() if secrets is None else secrets:
        text = text.replace(secret, "***")
    return text


def _true(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")
