"""issue 7: accounts and sign-in, driven through the real binaries against the emulator.

`dbx-mount auth` runs the whole PKCE exchange against the emulator's authorize stand-in and
/oauth2/token (which checks the code_verifier); mounts run on the saved refresh token, with access
tokens living 3 s; revoking, logout, loose configs, named accounts, fstab options and the team space.
Every byte dbx-mount prints (and its debug log) is kept and searched for tokens at the end of each
test. No test passes a token to dbx-mount: DBX_ACCESS_TOKEN is removed from its environment.
"""
import json
import os
import random
import re
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import DBX_MOUNT, TOKEN, Emulator, Mount, is_mounted, stop_mount, write_numbered_blocks

APP_KEY = "test-app-key"
SEED_REFRESH = "seed-refresh-token-unused-by-dbx-mount"
# Access tokens the emulator issues look like this; none may ever be printed.
ISSUED_TOKEN = re.compile(r"sl\.[A-Za-z0-9_-]{20,}")


class Session:
    """One emulator, a private config and cache home, and everything dbx-mount printed."""

    def __init__(self, tmp_path: Path, served: Path, *emulator_args: str):
        self.tmp = tmp_path
        self.emulator = Emulator(served, "--refresh-token", SEED_REFRESH, "--app-key", APP_KEY, *emulator_args)
        url = self.emulator.url
        self.env = {k: v for k, v in os.environ.items() if k not in ("DBX_ACCESS_TOKEN", "DBX_APP_KEY")}
        self.env.update(DBX_API_URL=url, DBX_CONTENT_URL=url, DBX_NOTIFY_URL=url,
                        DBX_AUTHORIZE_URL=url + "/oauth2/authorize",
                        XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"))
        self.outputs = []          # every stdout/stderr text dbx-mount produced
        self.log_files = []        # mount logs (debug output goes to files, not pipes)
        self.secrets = {SEED_REFRESH}
        self.mounts = []
        self.spare = tmp_path / "spare"    # an empty directory for mounts that must fail
        self.spare.mkdir(parents=True)

    @property
    def config_path(self) -> Path:
        return self.tmp / "config" / "dbx-mount" / "config.json"

    def config(self) -> dict:
        return json.loads(self.config_path.read_text())

    def remember_tokens(self):
        if self.config_path.exists():
            for account in self.config().get("accounts", {}).values():
                self.secrets.add(account["refresh_token"])

    def run(self, *args, timeout=60, env=None) -> subprocess.CompletedProcess:
        result = subprocess.run([str(DBX_MOUNT), *args], env=env or self.env, capture_output=True, text=True,
                                timeout=timeout, stdin=subprocess.DEVNULL)
        self.outputs += [result.stdout, result.stderr]
        return result

    def sign_in(self, *args, tamper=None) -> subprocess.CompletedProcess:
        """`dbx-mount auth` with the code pasted on stdin, as a user of the no-redirect flow does."""
        process = subprocess.Popen([str(DBX_MOUNT), "auth", "--app-key", APP_KEY, *args], env=self.env,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        url = process.stdout.readline().strip()
        assert url.startswith(self.emulator.url + "/oauth2/authorize?"), url
        if tamper:
            url = tamper(url)
        code = urllib.request.urlopen(url, timeout=10).read().decode().strip()
        out, err = process.communicate(code + "\n", timeout=60)
        self.outputs += [url, out, err]
        self.remember_tokens()
        return subprocess.CompletedProcess(process.args, process.returncode, url + "\n" + out, err)

    def stats(self) -> dict:
        return self.emulator.stats()["requests"]

    def token_calls(self) -> int:
        return self.stats().get("oauth2/token", 0)

    def access_token(self, refresh_token: str) -> str:
        """An access token from the refresh token, straight from the emulator (the test's own)."""
        form = urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": refresh_token,
                                       "client_id": APP_KEY}).encode()
        answer = json.load(urllib.request.urlopen(self.emulator.url + "/oauth2/token", data=form, timeout=10))
        self.secrets.add(answer["access_token"])
        return answer["access_token"]

    def revoke(self, refresh_token: str):
        request = urllib.request.Request(self.emulator.url + "/2/auth/token/revoke", data=b"null", method="POST",
                                         headers={"Authorization": "Bearer " + self.access_token(refresh_token),
                                                  "Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()

    def refresh_status(self, refresh_token: str) -> int:
        try:
            self.access_token(refresh_token)
            return 200
        except urllib.error.HTTPError as error:
            return error.code

    def mount(self, name: str, *args, env=None):
        mountpoint = self.tmp / name
        mountpoint.mkdir()
        log = self.tmp / f"{name}.log"
        self.log_files.append(log)
        with open(log, "w") as out:
            process = subprocess.Popen([str(DBX_MOUNT), "-f", *args, str(mountpoint)], env=env or self.env,
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self.mounts.append((mountpoint, process))
        deadline = time.monotonic() + 30
        while not is_mounted(mountpoint):
            if process.poll() is not None:
                raise RuntimeError(f"dbx-mount exited {process.returncode}: {log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError("dbx-mount did not mount within 30 s")
            time.sleep(0.05)
        # Neither argv nor the environment of the running mount holds a token (what `ps e` shows).
        pid = process.pid
        visible = Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/environ").read_bytes()
        visible += subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True).stdout
        for secret in self.secrets:
            assert secret.encode() not in visible
        return mountpoint, process, log

    def unmount_all(self):
        for mountpoint, process in self.mounts:
            stop_mount(mountpoint, process)
        self.mounts = []

    def check_no_tokens(self):
        self.remember_tokens()
        texts = self.outputs + [log.read_text(errors="replace") for log in self.log_files if log.exists()]
        for text in texts:
            for secret in self.secrets:
                assert secret not in text, "a token appeared in dbx-mount's output"
            assert not ISSUED_TOKEN.search(text), "an access token appeared in dbx-mount's output"


@pytest.fixture
def session(tmp_path):
    sessions = []

    def make(served: Path, *emulator_args: str) -> Session:
        s = Session(tmp_path / f"s{len(sessions)}", served, *emulator_args)
        sessions.append(s)
        return s

    yield make
    for s in sessions:
        s.unmount_all()
        s.emulator.stop()
    for s in sessions:
        s.check_no_tokens()


@pytest.fixture
def small_tree(tmp_path):
    root = tmp_path / "served"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_bytes(b"alpha\n")
    (root / "docs" / "unread.txt").write_bytes(b"never read before the revoke\n")
    (root / "top.txt").write_bytes(b"top\n")
    return root


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_pkce_sign_in_writes_a_private_config(session, small_tree):
    s = session(small_tree)
    result = s.sign_in()
    assert result.returncode == 0, result.stderr
    url = urllib.parse.urlparse(result.stdout.splitlines()[0])
    query = urllib.parse.parse_qs(url.query)
    assert query["client_id"] == [APP_KEY] and query["code_challenge_method"] == ["S256"]
    assert query["token_access_type"] == ["offline"] and "client_secret" not in query
    assert set(query["scope"][0].split()) == {"files.metadata.read", "files.content.read", "account_info.read",
                                              "sharing.read"}
    assert "Signed in as Emulator User <emulator@example.com>" in result.stderr
    assert mode(s.config_path) == 0o600
    assert mode(s.config_path.parent) == 0o700
    config = s.config()
    assert config["default"] == "default"
    account = config["accounts"]["default"]
    assert account["app_key"] == APP_KEY and account["email"] == "emulator@example.com" and account["refresh_token"]
    assert s.stats().get("oauth2/authorize") == 1 and s.stats().get("oauth2/token") == 1
    # The saved refresh token works, and whoami reads through it.
    assert s.refresh_status(account["refresh_token"]) == 200
    who = s.run("whoami")
    assert who.returncode == 0, who.stderr
    assert "Emulator User" in who.stdout and "emulator@example.com" in who.stdout
    assert re.search(r"space:\s+\d+ B used of 2\.0 TiB", who.stdout), who.stdout


def publish_link(emulator, path: str) -> str:
    request = urllib.request.Request(emulator.url + "/__admin/shared_links", data=json.dumps({"path": path}).encode(),
                                     method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)["url"]


def test_a_signed_in_account_mounts_a_shared_link(session, small_tree):
    # The token holds only the scopes the authorize URL asked for; link routes need sharing.read.
    s = session(small_tree)
    assert s.sign_in().returncode == 0
    url = publish_link(s.emulator, "/docs")
    mnt, process, log = s.mount("mnt", "--no-cache", url)
    assert sorted(os.listdir(mnt)) == ["a.txt", "unread.txt"]
    assert (mnt / "a.txt").read_bytes() == b"alpha\n"


def test_a_token_without_a_routes_scope_fails_in_one_line(session, small_tree):
    # The emulator answers 401 missing_scope as Dropbox does when the authorize URL left a scope out.
    s = session(small_tree)
    signed = s.sign_in(tamper=lambda url: url.replace("%20sharing.read", ""))
    assert signed.returncode == 0, signed.stderr
    url = publish_link(s.emulator, "/docs")
    mnt = s.tmp / "mnt"
    mnt.mkdir()
    result = s.run("-f", "--no-cache", url, str(mnt), timeout=60)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "missing_scope" in result.stderr
    assert not is_mounted(mnt)
    # The same token still mounts the account: its other scopes are there.
    mounted, process, log = s.mount("whole", "--no-cache")
    assert (mounted / "top.txt").read_bytes() == b"top\n"


def test_a_code_without_the_matching_verifier_is_refused(session, small_tree):
    # Authorize with another challenge: the emulator then rejects dbx-mount's code_verifier.
    s = session(small_tree)
    other = "A" * 43
    result = s.sign_in(tamper=lambda url: re.sub(r"code_challenge=[^&]+", "code_challenge=" + other, url))
    assert result.returncode == 1
    assert "invalid code verifier" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("dbx-mount: Dropbox did not accept the code")
    assert not s.config_path.exists()


def test_loopback_redirect_captures_the_code(session, small_tree):
    s = session(small_tree)
    process = subprocess.Popen([str(DBX_MOUNT), "auth", "--app-key", APP_KEY, "--redirect", "loopback",
                                "--redirect-port", "0", "--account", "loop"], env=s.env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = process.stdout.readline().strip()
    query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    assert query["redirect_uri"][0].startswith("http://127.0.0.1:") and query["state"][0]
    # A request without our state is not the redirect.
    stray = urllib.parse.urljoin(query["redirect_uri"][0], "/?code=forged&state=wrong")
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(stray, timeout=10)
    # The browser follows the emulator's 302 back to dbx-mount's listener.
    page = urllib.request.urlopen(url, timeout=10).read().decode()
    out, err = process.communicate(timeout=60)
    s.outputs += [url, out, err, page]
    assert process.returncode == 0, err
    assert "signed in" in page
    assert s.config()["accounts"]["loop"]["email"] == "emulator@example.com"
    s.remember_tokens()


def test_mount_refreshes_short_lived_tokens_while_streaming_and_finding(session, tmp_path):
    """Access tokens live 3 s; a 20 s stream of a large file and `find` loops see no error."""
    served = tmp_path / "served"
    served.mkdir()
    rng = random.Random(7)
    write_numbered_blocks(served / "big.bin", 160, rng.randbytes(1 << 20))
    for d in range(20):
        folder = served / f"folder-{d:02d}"
        folder.mkdir()
        for f in range(10):
            (folder / f"file-{f}.txt").write_bytes(b"%d %d\n" % (d, f))
    # 6 MB/s: the stream takes the whole 20 s, so downloads run across many refreshes.
    s = session(served, "--token-lifetime", "3", "--bandwidth", "6000000")
    assert s.sign_in().returncode == 0
    before = s.token_calls()
    mnt, process, log = s.mount("mnt", "-d", "-o", "ttl=1")

    stop_at = time.monotonic() + 20
    problems = []
    streamed = [0]

    def stream():
        try:
            with open(mnt / "big.bin", "rb") as mounted, open(served / "big.bin", "rb") as original:
                while time.monotonic() < stop_at:
                    chunk = mounted.read(1 << 20)
                    if not chunk:
                        break
                    if chunk != original.read(len(chunk)):
                        problems.append(f"bytes differ at {streamed[0]}")
                        return
                    streamed[0] += len(chunk)
        except OSError as error:
            problems.append(f"stream: {error}")

    reader = threading.Thread(target=stream)
    reader.start()
    finds = 0
    expected = sorted(str(p.relative_to(served)) for p in served.rglob("*"))
    while time.monotonic() < stop_at:
        result = subprocess.run(["find", str(mnt)], capture_output=True, text=True, timeout=60)
        if result.returncode != 0 or result.stderr:
            problems.append(f"find: {result.returncode} {result.stderr[:300]}")
            break
        found = sorted(str(Path(line).relative_to(mnt)) for line in result.stdout.splitlines()[1:])
        if found != expected:
            problems.append("find listed a different tree")
            break
        finds += 1
        time.sleep(0.2)
    reader.join(timeout=60)
    refreshes = s.token_calls() - before
    assert problems == []
    assert finds >= 10
    assert streamed[0] >= 20 << 20, f"only {streamed[0]} bytes streamed"
    assert refreshes >= 4, f"only {refreshes} refreshes in 20 s of 3 s tokens"
    assert process.poll() is None
    text = log.read_text(errors="replace")
    for bad in ["read failed", "listing failed", "refused the refresh token", "cannot refresh"]:
        assert bad not in text


def test_revoked_refresh_token_fails_with_eacces_and_one_clear_line(session, small_tree):
    s = session(small_tree, "--token-lifetime", "3")
    assert s.sign_in().returncode == 0
    mnt, process, log = s.mount("mnt")
    assert (mnt / "docs" / "a.txt").read_bytes() == b"alpha\n"
    s.revoke(s.config()["accounts"]["default"]["refresh_token"])
    time.sleep(3.5)   # the mount's access token has expired: its next call must refresh, and is refused
    with pytest.raises(PermissionError):
        (mnt / "docs" / "unread.txt").read_bytes()
    with pytest.raises(PermissionError):
        (mnt / "docs" / "unread.txt").read_bytes()
    assert process.poll() is None, "the mount crashed"
    refused = [line for line in log.read_text().splitlines() if "refused the refresh token" in line]
    assert len(refused) == 1, log.read_text()
    assert "dbx-mount auth" in refused[0]
    # A new mount, and whoami, fail at once with the same clear message.
    again = s.run(str(s.spare))
    assert again.returncode == 1
    assert len(again.stderr.strip().splitlines()) == 1
    assert "refused the refresh token (invalid_grant" in again.stderr and "dbx-mount auth" in again.stderr
    who = s.run("whoami")
    assert who.returncode == 1 and "refused the refresh token" in who.stderr


def test_a_revoked_account_says_sign_in_again_at_once_not_when_its_token_expires(session, small_tree):
    # Revoking (logout, the app unlinked) kills the access token too: Dropbox answers 401
    # invalid_access_token hours before it would expire, and only a refresh learns it is final.
    s = session(small_tree)
    assert s.sign_in().returncode == 0
    mnt, process, log = s.mount("mnt")
    assert (mnt / "docs" / "a.txt").read_bytes() == b"alpha\n"
    s.revoke(s.config()["accounts"]["default"]["refresh_token"])
    time.sleep(1.1)   # a token younger than a second is not refreshed on a 401
    for _ in range(3):
        with pytest.raises(PermissionError):
            (mnt / "docs" / "unread.txt").read_bytes()
    assert process.poll() is None, "the mount crashed"
    refused = [line for line in log.read_text().splitlines() if "refused the refresh token" in line]
    assert len(refused) == 1, log.read_text()


def test_a_fixed_token_refused_under_a_running_mount_says_why_once(small_tree, tmp_path):
    emulator = Emulator(small_tree)
    mount = Mount(emulator, tmp_path / "mnt")
    try:
        mnt = mount.mountpoint
        assert (mnt / "docs" / "a.txt").read_bytes() == b"alpha\n"
        request = urllib.request.Request(emulator.url + "/2/auth/token/revoke", data=b"null", method="POST",
                                         headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).read()
        for _ in range(3):
            with pytest.raises(PermissionError):
                (mnt / "docs" / "unread.txt").read_bytes()
        told = [line for line in mount.log().splitlines() if "refused the access token from DBX_ACCESS_TOKEN" in line]
        assert len(told) == 1, mount.log()
        assert "dbx-mount auth" in told[0] and TOKEN not in told[0]
    finally:
        mount.unmount()
        emulator.stop()


def test_an_auth_waiting_for_its_code_does_not_undo_another_finished_meanwhile(session, small_tree):
    s = session(small_tree)
    waiting = subprocess.Popen([str(DBX_MOUNT), "auth", "--app-key", APP_KEY, "--account", "alice"], env=s.env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = waiting.stdout.readline().strip()
    assert s.sign_in("--account", "bob").returncode == 0      # finished while alice's waits
    code = urllib.request.urlopen(url, timeout=10).read().decode().strip()
    out, err = waiting.communicate(code + "\n", timeout=60)
    s.outputs += [out, err]
    s.remember_tokens()
    assert waiting.returncode == 0, err
    assert sorted(s.config()["accounts"]) == ["alice", "bob"], "bob's sign-in was kept"


def test_loose_config_is_refused_with_the_fix(session, small_tree):
    s = session(small_tree)
    assert s.sign_in().returncode == 0
    path = s.config_path
    os.chmod(path, 0o644)
    for args in (["whoami"], ["-f", str(s.spare)]):
        result = s.run(*args)
        assert result.returncode == 1
        assert f"chmod 600 {path}" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    os.chmod(path, 0o600)
    os.chmod(path.parent, 0o777)
    result = s.run("whoami")
    assert result.returncode == 1 and f"chmod 700 {path.parent}" in result.stderr
    os.chmod(path.parent, 0o700)
    assert s.run("whoami").returncode == 0


def test_logout_revokes_and_forgets_the_account(session, small_tree):
    s = session(small_tree)
    assert s.sign_in().returncode == 0
    assert s.sign_in("--account", "work").returncode == 0
    config = s.config()
    assert config["default"] == "default" and set(config["accounts"]) == {"default", "work"}
    work = config["accounts"]["work"]["refresh_token"]
    result = s.run("logout", "--account", "work")
    assert result.returncode == 0, result.stderr
    assert "revoked" in result.stdout
    assert set(s.config()["accounts"]) == {"default"}
    assert mode(s.config_path) == 0o600
    assert s.stats().get("auth/token/revoke") == 1
    assert s.refresh_status(work) == 400            # invalid_grant: the token is dead at Dropbox
    assert s.run("whoami").returncode == 0          # the other account is untouched
    assert s.run("whoami", "--account", "work").returncode == 1
    assert s.run("logout").returncode == 0          # the default goes too
    assert s.config()["accounts"] == {}


def test_named_accounts_from_fstab_options(session, small_tree, tmp_path):
    s = session(small_tree)
    assert s.sign_in("--account", "home").returncode == 0
    assert s.sign_in("--account", "second").returncode == 0
    # mount.fuse3 passes SOURCE MOUNTPOINT -o ...; here the config is found only through config=PATH.
    elsewhere = dict(s.env, XDG_CONFIG_HOME=str(tmp_path / "empty-config"))
    mnt, _, _ = s.mount("fstab", "dropbox:/docs", "-o", f"account=second,config={s.config_path}", env=elsewhere)
    assert sorted(os.listdir(mnt)) == ["a.txt", "unread.txt"]
    who = s.run("whoami", "--account", "second", "--config", str(s.config_path), env=elsewhere)
    assert who.returncode == 0 and "account:  second" in who.stdout
    missing = s.run("-f", "-o", "account=nope", str(s.spare))
    assert missing.returncode == 1 and "no account 'nope'" in missing.stderr


def test_team_space_mount_shows_the_team_root(session, tmp_path):
    served = tmp_path / "team"
    (served / "Home").mkdir(parents=True)
    (served / "Home" / "mine.txt").write_bytes(b"mine\n")
    (served / "Team Shared").mkdir()
    (served / "Team Shared" / "plan.txt").write_bytes(b"plan\n")
    s = session(served, "--team")
    assert s.sign_in().returncode == 0
    who = s.run("whoami")
    assert who.returncode == 0 and "team:" in who.stdout
    home, _, _ = s.mount("home")
    assert sorted(os.listdir(home)) == ["mine.txt"]
    team, _, _ = s.mount("team", "--team-space")
    assert sorted(os.listdir(team)) == ["Home", "Team Shared"]
    assert (team / "Team Shared" / "plan.txt").read_bytes() == b"plan\n"
    assert (team / "Home" / "mine.txt").read_bytes() == b"mine\n"
    # The same account and namespace as the mount above: a cache of its own (one mount per cache).
    fstab, _, _ = s.mount("fstab", "-o", f"team_space,cache_dir={tmp_path / 'fstab-cache'}")
    assert sorted(os.listdir(fstab)) == ["Home", "Team Shared"]


def test_team_space_on_a_personal_account_fails_clearly(session, small_tree):
    s = session(small_tree)
    assert s.sign_in().returncode == 0
    result = s.run("-f", "--team-space", str(s.spare))
    assert result.returncode == 1 and "no team space" in result.stderr
