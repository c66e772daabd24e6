"""What an isolated tool can reach and leave behind: the trainer's environment variables (only an allow-list),
its working directory (a fresh one per call), its output (a capped log, not the trainer's), its child
processes (killed with its worker: at the time limit, on close, at the trainer's exit), and the trainer
script's top level (never run again in a worker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lit_grpo.envs import ToolEnvironment, isolation
from lit_grpo.envs.isolation import CUT_MARK
from lit_grpo.envs.tool_calls import ToolCall

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ROOT = Path(__file__).resolve().parents[2]
SECRET = "LIT_GRPO_TEST_SECRET"
RECORD = {"prompt": "Q", "reference": "", "id": "0", "columns": {}}
CALLS = 0  # what bump() counts, in the worker it runs in


def sleeper(folder: str, hang: bool) -> str:
    """Starts a ``sleep 1000`` child, writes its pid to ``folder/child.pid``, then hangs or returns the pid.

    Args:
        folder: Where the pid goes.
        hang: Whether to sleep instead of returning.
    """
    child = subprocess.Popen(["sleep", "1000"])
    Path(folder, "child.pid").write_text(str(child.pid))
    while hang:
        time.sleep(1)
    return str(child.pid)


def getenv(name: str) -> str:
    """An environment variable of the tool's process, and whether ``/proc/self/environ`` names it.

    Args:
        name: The variable.
    """
    with open("/proc/self/environ", "rb") as environ:
        listed = any(item.split(b"=", 1)[0] == name.encode() for item in environ.read().split(b"\0"))
    return f"{os.environ.get(name, 'absent')} {'listed' if listed else 'unlisted'}"


def setenv(name: str, value: str) -> str:
    """Sets an environment variable of the tool's process.

    Args:
        name: The variable.
        value: Its value.
    """
    os.environ[name] = value
    return "set"


def leave_file(name: str) -> str:
    """Writes a file in the working directory, changes into a subfolder, and returns where it wrote.

    Args:
        name: The file's name.
    """
    here = os.getcwd()
    Path(name).write_text("left behind")
    os.makedirs("sub", exist_ok=True)
    os.chdir("sub")
    return here


def look(name: str) -> str:
    """Whether a file is in the working directory, and which directory that is.

    Args:
        name: The file's name.
    """
    return json.dumps({"cwd": os.getcwd(), "seen": os.path.exists(name)})


def chatter(mb: int) -> str:
    """Prints ``mb`` megabytes to stdout and as many to stderr, from Python and from a child process.

    Args:
        mb: Megabytes per stream.
    """
    line = "chatter " * 127 + "\n"  # 1 KiB
    for _ in range(mb * 1024 // 2):
        sys.stdout.write(line)
        sys.stderr.write(line)
    sys.stdout.flush()
    sys.stderr.flush()
    subprocess.run(["sh", "-c", f"yes chatter | head -c {mb * 2**19}; yes chatter | head -c {mb * 2**19} >&2"],
                   check=True)
    return "said"


def bump() -> int:
    """Counts the calls its worker process has answered."""
    global CALLS
    CALLS += 1
    return CALLS


TOOLS = [sleeper, getenv, setenv, leave_file, look, chatter, bump]


def running(pid: int) -> bool:
    """Whether the process ``pid`` exists and has not ended (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def ended(pid: int, within_s: float = 60.0) -> bool:
    """Whether ``pid`` ends within ``within_s`` (a hang guard; a kill lands in milliseconds)."""
    deadline = time.monotonic() + within_s
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


@pytest.fixture
def reap():
    """Pids to kill after the test, so that a failing test leaves no ``sleep 1000`` behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_tools_child_is_killed_with_its_worker_at_the_time_limit(tmp_path, reap):
    env = ToolEnvironment(tools=TOOLS, workers=1, timeout_s=5.0)
    episode = env.reset(RECORD)
    answer = env.call(episode, ToolCall("sleeper", {"folder": str(tmp_path), "hang": True}))
    assert answer == "error: tool 'sleeper' ran past its time limit of 5 s" and episode.tool_timeouts == 1
    child = int((tmp_path / "child.pid").read_text())
    reap.append(child)
    assert ended(child), f"the tool's child {child} outlived its worker's kill at the time limit"
    env.close()


def test_close_kills_a_child_a_tool_left_running(tmp_path, reap):
    env = ToolEnvironment(tools=TOOLS, workers=1)
    child = int(env.call(env.reset(RECORD), ToolCall("sleeper", {"folder": str(tmp_path), "hang": False})))
    reap.append(child)
    assert running(child)  # a child a tool leaves behind lives on while its worker does
    env.close()
    assert ended(child), f"the tool's child {child} outlived close()"


def test_a_trainer_variable_reaches_a_tool_only_when_passed(monkeypatch):
    monkeypatch.setenv(SECRET, "s3cret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    for pass_env, seen in [([], "absent unlisted"), ([SECRET[:-3] + "*"], "s3cret"), (["*"], "s3cret")]:
        env = ToolEnvironment(tools=TOOLS, workers=1, pass_env=pass_env)
        episode = env.reset(RECORD)
        assert env.call(episode, ToolCall("getenv", {"name": SECRET})).startswith(seen), pass_env
        assert env.call(episode, ToolCall("getenv", {"name": "LANG"})).startswith("C.UTF-8")  # allow-listed
        env.close()
    with pytest.raises(ValueError, match=r"pass_env=.*\['HF_TOKEN'"):
        ToolEnvironment(tools=TOOLS, pass_env="HF_TOKEN")


def test_a_variable_one_call_sets_is_gone_in_the_next():
    env = ToolEnvironment(tools=TOOLS, workers=1)
    episode = env.reset(RECORD)
    assert env.call(episode, ToolCall("setenv", {"name": "LEFT_BY_A_CALL", "value": "1"})) == "set"
    assert env.call(episode, ToolCall("getenv", {"name": "LEFT_BY_A_CALL"})).startswith("absent")
    assert env._pool.started == 1  # the same worker answered both
    env.close()


def test_each_call_starts_in_an_empty_working_directory_removed_with_its_worker(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = ToolEnvironment(tools=TOOLS, workers=1)
    episode = env.reset(RECORD)
    first = env.call(episode, ToolCall("leave_file", {"name": "note.txt"}))
    second = json.loads(env.call(episode, ToolCall("look", {"name": "note.txt"})))
    assert not second["seen"] and second["cwd"] == first and os.listdir(first) == []  # emptied, not /sub
    assert Path(first).resolve() != tmp_path.resolve() and not (tmp_path / "note.txt").exists()
    assert env._pool.started == 1 and episode.tool_errors == 0
    env.close()
    assert not os.path.exists(first)


def test_a_tools_output_goes_to_a_capped_log_not_the_trainers(tmp_path, capfd):
    log = tmp_path / "tools.log"
    env = ToolEnvironment(tools=TOOLS, workers=1, log_path=str(log), log_bytes=2**16)
    assert env.call(env.reset(RECORD), ToolCall("chatter", {"mb": 5})) == "said"
    env.close()  # the log is complete once the workers are gone
    out, err = capfd.readouterr()
    assert "chatter" not in out and "chatter" not in err
    text = log.read_bytes()
    assert text.startswith(b"chatter ") and text.endswith(CUT_MARK % 2**16)
    assert len(text) == 2**16 + len(CUT_MARK % 2**16)


@pytest.mark.parametrize("calls_per_worker, counts", [(None, ["1", "2", "3"]), (1, ["1", "1", "1"])])
def test_module_globals_persist_on_a_worker_unless_it_is_replaced(calls_per_worker, counts):
    env = ToolEnvironment(tools=TOOLS, workers=1, calls_per_worker=calls_per_worker)
    episode = env.reset(RECORD)
    assert [env.call(episode, ToolCall("bump", {})) for _ in counts] == counts
    assert env._pool.started == (1 if calls_per_worker is None else 3)
    env.close()
    with pytest.raises(ValueError, match="calls_per_worker=0"):
        ToolEnvironment(tools=TOOLS, calls_per_worker=0)


def test_a_fork_server_killed_from_outside_is_started_again():
    env = ToolEnvironment(tools=TOOLS, workers=1)
    episode = env.reset(RECORD)
    assert env.call(episode, ToolCall("bump", {})) == "1"
    server = isolation._server()
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait()
    env.close()  # its worker, whose server is gone, is killed all the same
    assert env.call(episode, ToolCall("bump", {})) == "1" and isolation._server() is not server
    assert episode.tool_errors == 0
    env.close()


def test_spawned_workers_are_confined_the_same_way(tmp_path, monkeypatch, reap):
    monkeypatch.setenv(SECRET, "s3cret")
    env = ToolEnvironment(tools=TOOLS, workers=1, timeout_s=5.0, start_method="spawn")
    episode = env.reset(RECORD)
    assert env.call(episode, ToolCall("getenv", {"name": SECRET})) == "absent unlisted"
    first = env.call(episode, ToolCall("leave_file", {"name": "note.txt"}))
    assert not json.loads(env.call(episode, ToolCall("look", {"name": "note.txt"})))["seen"]
    answer = env.call(episode, ToolCall("sleeper", {"folder": str(tmp_path), "hang": True}))
    assert answer == "error: tool 'sleeper' ran past its time limit of 5 s"
    child = int((tmp_path / "child.pid").read_text())
    reap.append(child)
    assert ended(child), f"the tool's child {child} outlived its worker's kill at the time limit"
    env.close()
    assert not os.path.exists(first)


def run_script(folder: Path, source: str, *args: str) -> subprocess.CompletedProcess:
    """Runs ``source`` as the main script of a fresh interpreter, ``SECRET`` set in its environment, its
    temporary files in ``folder``. Its output goes to files (a pipe would stay open while a process that
    outlived it holds it)."""
    script = folder / "train.py"
    script.write_text(textwrap.dedent(source))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(folder), SECRET: "s3cret"}
    with open(folder / "stdout", "w+") as out, open(folder / "stderr", "w+") as err:
        ran = subprocess.run([sys.executable, str(script), *args], cwd=folder, env=env, stdout=out, stderr=err,
                             timeout=600)  # a hang guard
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(ran.args, ran.returncode, out.read(), err.read())


CONFINED = """
    import json, sys
    from lit_grpo.envs import ToolEnvironment
    from lit_grpo.envs.tool_calls import ToolCall
    from tests.envs.test_tool_confinement import SECRET, TOOLS

    if __name__ == "__main__":
        env = ToolEnvironment(tools=TOOLS, workers=1)
        episode = env.reset({"prompt": "Q", "reference": "", "id": "0", "columns": {}})
        call = lambda tool, **arguments: env.call(episode, ToolCall(tool, arguments))
        said = call("chatter", mb=5)
        secret = call("getenv", name=SECRET)
        first = call("leave_file", name="note.txt")
        second = json.loads(call("look", name="note.txt"))
        child = call("sleeper", folder=sys.argv[1], hang=False)
        print(json.dumps({"said": said, "secret": secret, "first": first, "second": second, "child": child}))
        # no close(): the trainer's exit stops the workers
"""


@pytest.fixture(scope="module")
def confined(tmp_path_factory) -> dict:
    """A trainer script (``SECRET`` in its environment) whose tools print 5 MB, read the secret, leave a file
    and a running child behind; then it exits without closing its environment."""
    folder = tmp_path_factory.mktemp("confined")
    ran = run_script(folder, CONFINED, str(folder))
    assert ran.returncode == 0, ran.stderr[-3000:]
    outcome = json.loads(ran.stdout.strip().splitlines()[-1])
    return {**outcome, "stdout": ran.stdout, "stderr": ran.stderr, "folder": folder}


def test_a_tool_does_not_see_the_trainers_secret(confined):
    assert confined["secret"] == "absent unlisted"  # neither in os.environ nor in the process's environment


def test_a_file_one_call_leaves_is_not_seen_by_the_next(confined):
    assert not confined["second"]["seen"] and not (confined["folder"] / "note.txt").exists()
    assert not os.path.exists(confined["first"])  # removed at the trainer's exit


def test_a_tools_megabytes_of_output_do_not_reach_the_trainers_output(confined):
    assert confined["said"] == "said"
    assert "chatter" not in confined["stdout"] and "chatter" not in confined["stderr"]


def test_the_trainers_exit_kills_a_child_a_tool_left_running(confined, reap):
    child = int(confined["child"])
    reap.append(child)
    assert ended(child), f"the tool's child {child} outlived the trainer's exit"


UNGUARDED = """
    from pathlib import Path
    from lit_grpo.envs import ToolEnvironment
    from lit_grpo.envs.tool_calls import ToolCall
    from tests.envs.test_tool_confinement import TOOLS

    with open(Path(__file__).with_name("ran.txt"), "a") as ran:  # the script's top level, without a guard
        ran.write("ran\\n")
    env = ToolEnvironment(tools=TOOLS, workers=2)
    episode = env.reset({"prompt": "Q", "reference": "", "id": "0", "columns": {}})
    print("answer", env.call(episode, ToolCall("bump", {})))
    env.close()
"""

OWN_TOOL = """
    from lit_grpo.envs import ToolEnvironment
    from lit_grpo.envs.tool_calls import ToolCall

    def double(x: int) -> int:
        \"\"\"Doubles a number.

        Args:
            x: The number.
        \"\"\"
        return 2 * x

    {guard}
        env = ToolEnvironment(tools=[double], workers=1)
        print("answer", env.call(env.reset({{"prompt": "Q", "reference": "", "id": "0", "columns": {{}}}}),
                                 ToolCall("double", {{"x": 21}})))
        env.close()
"""


def test_a_script_without_a_main_guard_is_not_run_again_by_the_workers(tmp_path):
    ran = run_script(tmp_path, UNGUARDED)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "answer 1" in ran.stdout and (tmp_path / "ran.txt").read_text() == "ran\n"


def test_a_tool_defined_in_a_script_without_a_main_guard_is_a_clear_error(tmp_path):
    ran = run_script(tmp_path, OWN_TOOL.format(guard="if True:"))
    assert ran.returncode != 0 and "answer" not in ran.stdout
    assert "tool 'double' is defined in the script" in ran.stderr
    assert 'put its work under if __name__ == "__main__":' in ran.stderr


def test_a_tool_defined_in_a_guarded_script_runs(tmp_path):
    ran = run_script(tmp_path, OWN_TOOL.format(guard='if __name__ == "__main__":'))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "answer 42" in ran.stdout
