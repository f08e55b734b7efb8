"""`--db` values and the secrets in them (results/dsn.py): a libpq keyword string is PostgreSQL (a real server,
tests/results/conftest.py), never a SQLite file of that name; a password is never shown; a job's secrets are
found in its environment and hidden wherever a dry run writes them."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gpuval.errors import UsageError
from gpuval.results.dsn import hide_secrets, holds_secret, is_secret_name, normalize_url, redact_url
from gpuval.results.query import Query
from gpuval.results.store import open_store
from tests.conftest import run_gpuval
from tests.helpers.records import record


def _keywords(url: str, password: str) -> str:
    """The libpq keyword string of a postgresql:// URL (the test server trusts every password)."""
    parts = urlsplit(url)
    return (f"host={parts.hostname} port={parts.port} user={parts.username} password={password} "
            f"dbname={parts.path.lstrip('/')}")


def test_a_libpq_keyword_string_is_postgresql_and_its_password_is_never_shown(pg_url: str, tmp_path: Path):
    """`--db 'host=... password=pw8 ...'` was taken for a SQLite path: a 0644 file of that name appeared in the
    working folder and the password was printed (reliability review D15 a)."""
    keywords = _keywords(pg_url, "pw8")
    store = open_store(keywords)
    assert store.dialect == "postgresql" and "pw8" not in store.url
    store.add([record(run="over-libpq")])
    assert [r.run_id for r in open_store(pg_url).runs(Query())] == ["over-libpq"]
    proc = run_gpuval("history", "--db", keywords, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "over-libpq" in proc.stdout and "pw8" not in proc.stdout + proc.stderr
    assert os.listdir(tmp_path) == []  # no file named after the connection string


def test_a_quoted_libpq_value_and_a_word_libpq_does_not_know():
    url = normalize_url("host=db.example password='p w\\'x' dbname=gv")
    assert url == "postgresql+psycopg:///?host=db.example&password=p+w%27x&dbname=gv"
    with pytest.raises(UsageError, match="'colour' is no libpq connection keyword"):
        normalize_url("host=db colour=blue")
    assert normalize_url("./my=file.db").startswith("sqlite:///")  # a path with '=' is still a path


def test_the_secrets_of_a_jobs_environment_are_found_and_hidden():
    """One rule (hide_secrets): a secret-named variable's whole value, the password alone inside a URL or a libpq
    string (host and user are no secret), quoted, non-ASCII or holding an `@` as it may be."""
    env = {"GPUVAL_DB": "postgresql://gv:TopSecret9@db:5432/gpuval", "HF_TOKEN": "hf_abc123",
           "PGCONN": "host=db password='s3 cr' dbname=x", "MLFLOW_URI": "https://u:pa55@ml/", "NCCL_DEBUG": "INFO",
           "DB_PASSWORD": "pw", "QUOTED": "postgresql://gv:pa'ss9@db/gv", "AT": "postgresql://gv:p@ss@db/gv",
           "API_KEY": "café-Secr3t", "Q": "https://h/x?sslmode=on&password=q9&x=1"}
    shown = hide_secrets(env)
    assert shown == {"GPUVAL_DB": "postgresql://gv:***@db:5432/gpuval", "HF_TOKEN": "***",
                     "PGCONN": "host=db password=*** dbname=x", "MLFLOW_URI": "https://u:***@ml/",
                     "NCCL_DEBUG": "INFO", "DB_PASSWORD": "***", "QUOTED": "postgresql://gv:***@db/gv",
                     "AT": "postgresql://gv:***@db/gv", "API_KEY": "***",
                     "Q": "https://h/x?sslmode=on&password=***&x=1"}
    assert [k for k, v in env.items() if holds_secret(k, v)] == [k for k in env if k != "NCCL_DEBUG"]
    assert all(holds_secret(k, v) == holds_secret(k, shown[k]) for k, v in env.items())  # *** is still a secret


# Variable names, by the rule of results/dsn.py `is_secret_name` (docs/engines.md, "Secrets").
SECRET_NAMES = [
    "PGPASSWORD", "MYSQL_PWD", "MYSQL_ROOT_PASSWORD", "DB_PASSWD", "GPG_PASSPHRASE", "RABBITMQ_DEFAULT_PASS",
    "DBPASS", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_CLIENT_SECRET", "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_CONNECTION_STRING", "AZURE_SAS_TOKEN", "AZURE_STORAGE_SAS", "GITHUB_TOKEN", "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "OPENAI_APIKEY", "SSH_PRIVATE_KEY", "ACCOUNTKEY", "MUNGE_KEY",
    "SLACK_WEBHOOK_SECRET", "SLACK_WEBHOOK_URL", "SENTRY_DSN", "VAULT_TOKEN", "DOCKER_AUTH_CONFIG", "OAUTH",
    "HTTP_AUTHORIZATION", "SESSION_COOKIE", "JSESSIONID", "GOOGLE_APPLICATION_CREDENTIALS", "DOCKER_CREDS",
    "DB_CONNSTR", "api_key", "db-password", "accessToken", "TOKEN", "SECRET", "KEY",
    # taken as secrets though they are not (a key's id or path, an agent's socket): harmless, the value moves to
    # the job's Secret and a dry run shows ***
    "AWS_ACCESS_KEY_ID", "SSH_KEY_FILE", "SSH_AUTH_SOCK",
    # red team 6 R4: PASS at a word's end (`sshpass -e` reads SSHPASS; smbclient SMBPASS), PW as a word's end
    "SSHPASS", "SMBPASS", "adminPass", "ADMIN_PW", "MYSQL_ROOT_PW", "PW_ADMIN", "ROOTPW",
]
PLAIN_NAMES = [
    "PWD", "OLDPWD",  # the shell's working folders, not a password (MYSQL_PWD is one)
    "NCCL_IB_HCA", "NCCL_IB_PKEY", "UCX_IB_PKEY", "NCCL_SOCKET_IFNAME", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_DEBUG",
    "CUDA_VISIBLE_DEVICES", "OMPI_MCA_pml", "TOKENIZERS_PARALLELISM", "KEYBOARD", "GNOME_KEYRING_CONTROL",
    "PYTHON_KEYRING_BACKEND", "GIT_AUTHOR_NAME", "PGPASSFILE", "PGSSLKEY", "PGUSER", "MASTER_ADDR", "HOME",
    "PATH", "AZURE_CLIENT_ID", "ORACLE_SID", "XDG_SESSION_TYPE",
    "GPUVAL_DB", "DATABASE_URL",  # connections: their values are read for a password (below), not hidden whole
    # PASS not at a word's end, or in an English word ending in "pass" (the rule's exceptions); PW inside a word
    "PASSES", "NUM_PASSES", "PASSTHROUGH", "BYPASS", "CACHE_BYPASS", "COMPASS_HOME", "SURPASS", "PWRSTAT",
]


def test_which_variable_names_are_secret():
    """Reliability-4 D17 / red team 5 N8: PGPASSWORD and MYSQL_PWD were not secrets (the rule wanted `_` before
    PASSWORD or PWD); a name's word, not a bare substring, decides (KEYBOARD, TOKENIZERS, NCCL_IB_PKEY are none).
    Red team 6 R4: SSHPASS, SMBPASS and *_PW were not secrets (PASS counted only as a whole word, PW not at all);
    BYPASS, COMPASS and PASSES stay plain."""
    wrong = [n for n in SECRET_NAMES if not is_secret_name(n)] + [n for n in PLAIN_NAMES if is_secret_name(n)]
    assert wrong == []
    assert hide_secrets({n: "v4lue" for n in SECRET_NAMES}) == {n: "***" for n in SECRET_NAMES}
    assert hide_secrets({n: "v4lue" for n in PLAIN_NAMES}) == {n: "v4lue" for n in PLAIN_NAMES}


_GH = "ghp_" + "a1B2" * 9
_HF = "hf_" + "Zx9" * 12
_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
# (name, value, as a dry run shows it): a secret-named variable's whole value is the secret, whatever it looks like;
# any other value shows all but the secrets inside it (a URL's password, a secret-named parameter, a known token)
VALUES = [
    ("SLACK_WEBHOOK_SECRET", "https://hooks.slack.com/services/T0/B0/W3bh00kS3cret", "***"),
    ("AZURE_SAS_TOKEN", "https://acct.blob.core.windows.net/ckpt?sv=2022-11-02&sig=SasS1gS3cret", "***"),
    ("DB_PASSWORD", "postgresql://gv:pw@db/gv", "***"),
    ("HF_TOKEN", "host=db password=x", "***"),
    ("OFF_TOKEN", "none", "***"),
    ("EMPTY_TOKEN", "", ""),  # nothing to hide
    ("GPUVAL_DB", "none", "none"),  # every job's default: the store off
    ("GPUVAL_DB", "/srv/gpuval/results.db", "/srv/gpuval/results.db"),
    ("DATABASE_URL", "mysql://u:p@ss@db/x", "mysql://u:***@db/x"),
    ("CKPT_URL", "https://acct.blob.core.windows.net/c?sv=2022&sig=S1g%2Bx&sp=r",
     "https://acct.blob.core.windows.net/c?sv=2022&sig=***&sp=r"),
    ("S3_URL", "https://b.s3.amazonaws.com/o?X-Amz-Security-Token=T0k&X-Amz-Signature=abc123&X-Amz-Expires=60",
     "https://b.s3.amazonaws.com/o?X-Amz-Security-Token=***&X-Amz-Signature=***&X-Amz-Expires=60"),
    ("STORAGE", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9v==;EndpointSuffix=core.windows.net",
     "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=***;EndpointSuffix=core.windows.net"),
    ("MSSQL", "Server=db;User Id=gv;Pwd=S3c r;", "Server=db;User Id=gv;Pwd=***;"),
    ("PGCONN", "host=db password='s3 cr' dbname=x", "host=db password=*** dbname=x"),
    ("NOTIFY", "https://hooks.slack.com/services/T0AB/B0CD/W3bh00kS3cret", "https://hooks.slack.com/services/***"),
    ("GIT_REMOTE", f"https://{_GH}@github.com/o/r", "https://***@github.com/o/r"),
    ("EXTRA_ARGS", f"--model m --hub {_HF}", "--model m --hub ***"),
    ("HEADER", f"Bearer {_JWT}", "Bearer ***"),
    ("NCCL_DEBUG", "INFO", "INFO"),
    ("LIBPQ", "host=db user=gv sslmode=require", "host=db user=gv sslmode=require"),
    ("SOME_URL", "https://u@h/x?sslmode=require&sv=1", "https://u@h/x?sslmode=require&sv=1"),
    ("PWD", "/home/op/project", "/home/op/project"),
    # red team 6 R4: a command line's secret option, an Authorization header's credentials, netrc, a Teams webhook
    ("TRAIN_ARGS", "--hf-token hfS3cret --password=argS3cret --model m", "--hf-token *** --password=*** --model m"),
    ("JAVA_OPTS", "-Xmx4g -Djavax.net.ssl.keyStorePassword=S3c", "-Xmx4g -Djavax.net.ssl.keyStorePassword=***"),
    ("EXTRA_HEADERS", "Authorization: Bearer beArerS3cretXYZ", "Authorization: Bearer ***"),
    # red team 7 S4: a JSON member's, a YAML key's and a header's `key: S`; a plain one stays
    ("DB_CONFIG", '{"user": "u", "password": "jsonS3cret"}', '{"user": "u", "password": "***"}'),
    ("APP_SETTINGS", "password: yamlS3cret", "password: ***"),
    ("MORE_HEADERS", "X-Api-Key: hdrS3cret", "X-Api-Key: ***"),
    ("NCCL_SETTINGS", '{"NCCL_DEBUG": "INFO", "url": "https://h:8080/x"}',
     '{"NCCL_DEBUG": "INFO", "url": "https://h:8080/x"}'),
    ("CURL_ARGS", "-H 'Authorization: Basic dXNlcjpwYXNz' -X GET", "-H 'Authorization: Basic ***' -X GET"),
    ("HEADERS_JSON", '{"Authorization": "token S3c"}', '{"Authorization": "token ***"}'),
    ("HDR", "Authorization=Bearer S3c", "Authorization=*** ***"),
    ("NETRC", "machine h login u password S3c", "machine h login u password ***"),
    ("TEAMS_HOOK_URL", "https://contoso.webhook.office.com/webhookb2/a@b/IncomingWebhook/c/d",
     "https://contoso.webhook.office.com/***"),
    ("HF_ARGS", "--use-auth-token --model m", "--use-auth-token --model m"),  # a flag: the next option is no value
    ("ARGS", "--tokenizer gpt2 --passes 3 --bypass-cache 1", "--tokenizer gpt2 --passes 3 --bypass-cache 1"),
]


def test_what_of_each_value_is_secret():
    """Red team 5 N8: a secret-named value holding `://` hid only a URL's password, so a Slack webhook *_SECRET and
    an Azure SAS URL *_TOKEN showed whole. Red team 6 R4: `--password=S`, `--hf-token S` and `Authorization: Bearer
    S` inside a longer value showed whole (a pair's key had to start the value or follow a space; no header shape).
    holds_secret (what the Kubernetes Secret gets) agrees with what is shown."""
    wrong = [(n, v, hide_secrets({n: v})[n]) for n, v, shown in VALUES if hide_secrets({n: v})[n] != shown]
    assert wrong == []
    assert [n for n, v, shown in VALUES if holds_secret(n, v) != (v != shown)] == []
    assert all(holds_secret(n, shown) for n, v, shown in VALUES if v != shown)  # *** is still a secret
    assert redact_url("postgresql+psycopg://gv:pw@db/gv?sslpassword=k3y&sslmode=require") == \
        "postgresql+psycopg://gv:***@db/gv?sslpassword=***&sslmode=require"
