"""An attempt's child gets an allow-list of the server's environment and its binding's ``env``,
nothing else. Real processes."""

from __future__ import annotations

import pytest

from worklife.executors import CommandExecutor, PythonExecutor

SERVER_SECRETS = {
    "SECRET_KEY": "django-secret-key-do-not-leak",
    "DATABASE_URL": "postgres://conduit:db-password-do-not-leak@db.internal:5432/conduit",
    "REDIS_URL": "redis://:redis-password-do-not-leak@cache:6379/0",
    "CONDUIT_WEBHOOK_SECRET": "made-up-server-secret-do-not-leak",
    "CONDUIT_ENV": "production-do-not-leak",
    "CONDUIT_VAR_DIR": "/srv/conduit-var-do-not-leak",
    "AWS_SECRET_ACCESS_KEY": "aws-key-do-not-leak",
}
ALLOWED = {
    "LANG": "C.UTF-8",
    "LC_TIME": "C",
    "LC_ALL": "C.UTF-8",
    "TZ": "Europe/Paris",
    "HOME": "/home/conduit-test",
}
BINDING_ENV = {"GREETING": "hi", "CONDUIT_API_URL": "http://conduit.example/api"}
PROTOCOL = {"CONDUIT_WORK_ID", "CONDUIT_ATTEMPT_ID", "CONDUIT_CALL_FD", "CONDUIT_PROCESS_MARK"}


@pytest.fixture
def server_environment(monkeypatch, tmp_path):
    for name, value in {**SERVER_SECRETS, **ALLOWED, "TMPDIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    return {**ALLOWED, "TMPDIR": str(tmp_path)}


def assert_contained(env: dict[str, str], allowed: dict[str, str], *, also: set[str]) -> None:
    text = repr(env)
    for name, value in SERVER_SECRETS.items():
        assert name not in env
        assert value not in text, f"{name}'s value reached the child"
    for name, value in {**allowed, **BINDING_ENV}.items():
        assert env.get(name) == value, name
    assert {name for name in env if name.startswith("CONDUIT_")} == PROTOCOL | {"CONDUIT_API_URL"}
    expected = {"PATH", *allowed, *BINDING_ENV, *PROTOCOL, *also}
    unexpected = {name for name in env if name not in expected and not name.startswith("LC_")}
    assert not unexpected, f"not on the allow-list: {sorted(unexpected)}"


def test_a_command_gets_the_allow_list_and_its_binding_env_only(server_environment):
    execution = CommandExecutor().start(
        work_id=5,
        attempt_id=50,
        binding_settings={"argv": ["sh", "-c", "env"], "env": BINDING_ENV},
        inputs=[],
    )
    outcome = execution.wait(timeout=30)
    assert outcome is not None and outcome.ok, outcome
    stdout, _ = execution.output()
    env = dict(line.partition("=")[::2] for line in stdout.splitlines() if "=" in line)
    # sh sets PWD (and some shells SHLVL, OLDPWD and _); PYTHONPATH names the project.
    assert_contained(env, server_environment, also={"PYTHONPATH", "PWD", "SHLVL", "OLDPWD", "_"})
    assert env["CONDUIT_WORK_ID"] == "5" and env["CONDUIT_ATTEMPT_ID"] == "50"


def test_a_python_target_gets_the_allow_list_its_binding_env_and_still_imports(server_environment):
    executor = PythonExecutor()
    try:
        execution = executor.start(
            work_id=6,
            attempt_id=60,
            binding_settings={"target": "tests.worklife.targets:environment", "env": BINDING_ENV},
            inputs=[],
        )
        outcome = execution.wait(timeout=30)
        assert outcome is not None and outcome.ok, outcome
        env = outcome.result
        assert_contained(env, server_environment, also={"PYTHONPATH", "PYTHONUNBUFFERED"})
        assert env["CONDUIT_WORK_ID"] == "6" and env["CONDUIT_ATTEMPT_ID"] == "60"
        execution.release()
        # The next attempt's process, forked from the binding's server, has that attempt's
        # ids; a binding with another env gets a server of its own.
        again = executor.start(
            work_id=7,
            attempt_id=70,
            binding_settings={"target": "tests.worklife.targets:environment", "env": BINDING_ENV},
            inputs=[],
        )
        assert again.wait(timeout=30).result["CONDUIT_ATTEMPT_ID"] == "70"
        assert again.pid != execution.pid
        again.release()
        other = executor.start(
            work_id=8,
            attempt_id=80,
            binding_settings={"target": "tests.worklife.targets:environment", "env": {"OTHER": "1"}},
            inputs=[],
        )
        result = other.wait(timeout=30).result
        assert other.pid != execution.pid
        assert result["OTHER"] == "1" and "GREETING" not in result
    finally:
        executor.close()


@pytest.mark.parametrize("executor", [CommandExecutor, PythonExecutor])
def test_the_env_setting_is_a_mapping_of_names_to_strings(executor):
    base = {"argv": ["true"]} if executor is CommandExecutor else {"target": "a.b:c"}
    assert list(executor.validate_settings({**base, "env": {"A": "1", "LANG": "C"}})) == []
    assert list(executor.validate_settings({**base, "env": ["A=1"]})) == [
        ("env", "expected a mapping of names to strings")
    ]
    assert list(
        executor.validate_settings({**base, "env": {"N": 3, "A=B": "x", "CONDUIT_ATTEMPT_ID": "9"}})
    ) == [
        ("env.N", "expected a string (quote numbers)"),
        ("env.A=B", "not a variable name"),
        ("env.CONDUIT_ATTEMPT_ID", "set by the attempt protocol (a binding cannot set it)"),
    ]
