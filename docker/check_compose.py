#!/usr/bin/env python3
"""Validate docker/compose.yaml and docker/Dockerfile without Docker (CI has
none): the YAML parses, the services docs/guides/compose.md promises are there and
wired (health checks, start order, the database URL), and the Dockerfile is
a multi-stage build of the release binary that runs as a non-root user.

With a `holdfast` binary as the first argument, every service's command is
also checked to be a real subcommand (`holdfast CMD --help` succeeds).

Usage: python3 docker/check_compose.py [path/to/holdfast]
"""

import pathlib
import re
import subprocess
import sys
from urllib.parse import urlparse

import yaml

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
HOLDFAST_SERVICES = ["migrate", "api", "worker", "maintenance"]
problems = []


def check(condition, message):
    if not condition:
        problems.append(message)
    return condition


compose = yaml.safe_load((HERE / "compose.yaml").read_text())
services = compose.get("services", {})
for name in ["postgres"] + HOLDFAST_SERVICES:
    check(name in services, f"service {name} is missing")

postgres = services.get("postgres", {})
check("healthcheck" in postgres, "postgres has no health check")
check(postgres.get("profiles") == ["bundled"], "the bundled postgres must be optional (profile bundled)")
check(services.get("migrate", {}).get("depends_on", {}).get("postgres", {}).get("required") is False,
      "migrate must run without the bundled postgres (depends_on.postgres.required: false)")

for name in HOLDFAST_SERVICES:
    service = services.get(name, {})
    build = service.get("build", {})
    context = (HERE / build.get("context", ".")).resolve()
    check(context == ROOT, f"{name}: build context {context} is not the repository root")
    check(
        (context / build.get("dockerfile", "")).resolve() == HERE / "Dockerfile",
        f"{name}: does not build docker/Dockerfile",
    )
    command = service.get("command")
    check(isinstance(command, list) and command, f"{name}: command must be a list")
    url = service.get("environment", {}).get("HOLDFAST_DATABASE_URL", "")
    # `${HOLDFAST_DATABASE_URL:-default}`: the environment's URL, else the bundled Postgres.
    interpolated = re.fullmatch(r"\$\{HOLDFAST_DATABASE_URL:-(.*)\}", url)
    check(interpolated is not None, f"{name}: HOLDFAST_DATABASE_URL must come from the environment (${{HOLDFAST_DATABASE_URL:-...}})")
    default = interpolated.group(1) if interpolated else url
    check(urlparse(default).hostname == "postgres", f"{name}: HOLDFAST_DATABASE_URL's default does not point at the postgres service")
    for key in ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]:
        value = str(service.get("environment", {}).get(key, ""))
        check(value.startswith("${" + key), f"{name}: {key} must come from the environment")
    for dependency, how in service.get("depends_on", {}).items():
        check(dependency in services, f"{name}: depends on unknown service {dependency}")
        if how.get("condition") == "service_healthy":
            check("healthcheck" in services.get(dependency, {}), f"{name}: waits for {dependency} to be healthy, which has no health check")

check(services.get("migrate", {}).get("depends_on", {}).get("postgres", {}).get("condition") == "service_healthy",
      "migrate must wait for a healthy postgres")
api_health = services.get("api", {}).get("healthcheck", {}).get("test", [])
check(any("/readyz" in str(part) for part in api_health), "the api health check must call /readyz")
check(services.get("worker", {}).get("deploy", {}).get("replicas", 1) >= 2, "two workers (deploy.replicas: 2)")
for name in ["worker", "maintenance"]:
    check(services.get(name, {}).get("depends_on", {}).get("migrate", {}).get("condition") == "service_completed_successfully",
          f"{name} must start after the migration")

dockerfile = (HERE / "Dockerfile").read_text()
stages = re.findall(r"^FROM\s+\S+(?:\s+AS\s+(\S+))?", dockerfile, re.MULTILINE | re.IGNORECASE)
check(len(stages) >= 2, "the Dockerfile must be multi-stage (a build stage and a runtime stage)")
check("cargo build --release --locked -p holdfast" in dockerfile, "the Dockerfile must build the release binary with --locked")
final_stage = re.split(r"^FROM\s", dockerfile, flags=re.MULTILINE | re.IGNORECASE)[-1]
users = re.findall(r"^USER\s+(\S+)", final_stage, re.MULTILINE)
check(users and users[-1].split(":")[0] not in ("root", "0"), "the runtime stage must run as a non-root user")
check(re.search(r'^ENTRYPOINT\s+\["holdfast"\]', final_stage, re.MULTILINE), 'the runtime stage must have ENTRYPOINT ["holdfast"]')

if len(sys.argv) > 1:
    binary = sys.argv[1]
    for name in HOLDFAST_SERVICES:
        command = services.get(name, {}).get("command") or []
        if command:
            run = subprocess.run([binary, *command, "--help"], capture_output=True)
            check(run.returncode == 0, f"{name}: `holdfast {' '.join(command)}` is not a holdfast command")

if problems:
    print("docker/: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"docker/: compose.yaml ({', '.join(services)}) and Dockerfile are valid")
