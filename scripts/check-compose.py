#!/usr/bin/env python3
"""Validates docker-compose.yml without a Docker engine.

1. A real YAML parser (PyYAML), then the Compose file JSON schema (compose-spec's
   compose_spec.json, as shipped in the docker-compose 1.29.2 package on PyPI).
2. Our own rules: migrations run as the schema owner, never as the cluster's superuser; the
   init script that creates the roles is mounted; the application's URL names a member of
   babybasics_app, not the owner or the superuser.

    scripts/check-compose.py [docker-compose.yml]   # exit 0 when valid, 1 with the reasons
    scripts/check-compose.py --self-test            # proves each check refuses a broken file
"""
import copy
import importlib.util
import json
import os
import pathlib
import sys
import urllib.parse

import jsonschema
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_schema():
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("error: the compose schema is missing; run make test (it installs docker-compose==1.29.2 into .venv-tools/)")
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "config" / "compose_spec.json"
    return json.loads(path.read_text())


def user_of(url):
    return urllib.parse.urlparse(url).username


def problems(document, schema, init_sql):
    found = []
    # The schema names its draft (2019-09); validate by that draft's rules.
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    for error in sorted(validator.iter_errors(document), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in error.path) or "(top)"
        found.append(f"schema: {where}: {error.message}")
    services = document.get("services") or {}
    db = services.get("db") or {}
    superuser = (db.get("environment") or {}).get("POSTGRES_USER", "postgres")
    database = (db.get("environment") or {}).get("POSTGRES_DB", superuser)
    migrate_url = ((services.get("migrate") or {}).get("environment") or {}).get("DATABASE_URL", "")
    migrate_user = user_of(migrate_url)
    if not migrate_user:
        found.append("migrate: DATABASE_URL names no user")
    elif migrate_user == superuser:
        found.append(f"migrate: runs as {migrate_user}, the cluster's superuser; the schema owner must not be one")
    if migrate_url and urllib.parse.urlparse(migrate_url).path.lstrip("/") != database:
        found.append(f"migrate: DATABASE_URL does not name {database}, the database POSTGRES_DB creates and the init script hands to the owner")
    if not any(str(v).endswith(":/docker-entrypoint-initdb.d:ro") or str(v).endswith(":/docker-entrypoint-initdb.d")
               for v in db.get("volumes") or []):
        found.append("db: docker/initdb is not mounted at /docker-entrypoint-initdb.d (the roles would not exist)")
    if migrate_user and f"CREATE ROLE {migrate_user} LOGIN NOSUPERUSER" not in init_sql.replace("'", ""):
        found.append(f"docker/initdb: does not create {migrate_user} as a NOSUPERUSER login role")
    app_url = document.get("x-app-database-url", "")
    app_user = user_of(app_url)
    if not app_user or app_user in (superuser, migrate_user):
        found.append(f"x-app-database-url: the application must log in as its own role, not {app_user or 'nobody'}")
    elif f"GRANT babybasics_app TO {app_user}" not in init_sql:
        found.append(f"docker/initdb: {app_user} is not made a member of babybasics_app")
    return found


def self_test(document, schema, init_sql):
    """Each broken variant must be refused; the real file must pass."""
    assert problems(document, schema, init_sql) == [], "the real file must pass"
    broken = []
    variant = copy.deepcopy(document)
    variant["services"]["migrate"]["environment"]["DATABASE_URL"] = "postgresql://postgres:x@db:5432/babybasics"
    broken.append(("migrate as the superuser", variant))
    variant = copy.deepcopy(document)
    variant["services"]["db"]["healthcheck"]["interval"] = {"seconds": 2}
    broken.append(("a healthcheck interval that is not a duration", variant))
    variant = copy.deepcopy(document)
    variant["services"]["migrate"]["depends_on"]["db"]["condition"] = "service_ready"
    broken.append(("an unknown depends_on condition", variant))
    variant = copy.deepcopy(document)
    variant["services"]["db"]["volumes"] = ["pgdata:/var/lib/postgresql/data"]
    broken.append(("the init script not mounted", variant))
    variant = copy.deepcopy(document)
    variant["x-app-database-url"] = "postgresql://babybasics_owner:x@db:5432/babybasics"
    broken.append(("the app as the schema owner", variant))
    variant = copy.deepcopy(document)
    variant["services"]["migrate"]["environment"]["DATABASE_URL"] = "postgresql://babybasics_owner:x@db:5432/postgres"
    broken.append(("migrations into another database", variant))
    variant = copy.deepcopy(document)
    variant["services"]["migrate"]["restart_policy"] = "no"
    broken.append(("a key Compose does not know", variant))
    variant = copy.deepcopy(document)
    variant["services"]["db"]["ports"] = [{"published": "5432"}]
    broken.append(("a port without its target", variant))
    for name, variant in broken:
        if not problems(variant, schema, init_sql):
            sys.exit(f"self-test failed: {name} was accepted")
    print(f"check-compose self-test: {len(broken)} broken variants refused, the real file accepted")


def main():
    arguments = sys.argv[1:]
    path = ROOT / "docker-compose.yml"
    if arguments and arguments[0] != "--self-test":
        path = pathlib.Path(arguments[0])
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        sys.exit(f"{path}: not valid YAML: {error}")
    if not isinstance(document, dict):
        sys.exit(f"{path}: not a Compose file (its top level is not a mapping)")
    init_sql = (ROOT / "docker" / "initdb" / "01-roles.sql").read_text()
    schema = load_schema()
    if "--self-test" in arguments:
        self_test(document, schema, init_sql)
        return
    found = problems(document, schema, init_sql)
    if found:
        print(f"{path}: not valid:", file=sys.stderr)
        for problem in found:
            print(f"  - {problem}", file=sys.stderr)
        sys.exit(1)
    print(f"{os.path.relpath(path)}: valid (YAML, the Compose schema, and our role rules)")


if __name__ == "__main__":
    main()
