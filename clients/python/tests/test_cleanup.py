"""A daemon the client spawned leaves nothing once the client is closed:
no process, no cgroup, no mount, and its temporary directory goes."""
from __future__ import annotations

import os
import unittest

import cubicle
from daemon_fixture import (BINARY, ROOT, Workdir, descendants, isolation_prefix, leftovers, require_binary,
                            workspace_mounts)

WAIT = 60.0


class CleanupTest(unittest.TestCase):
    def test_closing_a_spawned_daemon_leaves_nothing(self) -> None:
        require_binary()
        workdir = Workdir()
        self.addCleanup(lambda: os.path.exists(workdir.path) and workdir.remove())
        with open(workdir.log, "ab") as log:
            client = cubicle.spawn(["--config", workdir.config, "--state-dir", workdir.state], binary=BINARY,
                                   prefix=isolation_prefix(), stderr=log, timeout=WAIT)
            process = client.transport.process
            try:
                self.assertTrue(client.run(["echo", "x"]).ok)
                if ROOT:
                    self.check_workspaces_stay_in_the_daemons_namespace(client, process.pid, workdir)
                below = descendants(process.pid)
                self.assertTrue(below, "the daemon has no zygote to watch")
            finally:
                client.close()
        self.assertEqual(process.returncode, 0, workdir.log_text())
        self.assertEqual(leftovers(process.pid, below), [])
        workdir.remove()  # fails (EBUSY) if a workspace were still mounted here
        self.assertFalse(os.path.exists(workdir.path))
        with self.assertRaises(cubicle.TransportError):
            client.health()

    def check_workspaces_stay_in_the_daemons_namespace(self, client: cubicle.Client, pid: int,
                                                       workdir: Workdir) -> None:
        with client.session(profile="shell") as s:
            mounted = workspace_mounts(pid, workdir.path)
            self.assertEqual(len(mounted), 1, "one session, one workspace tmpfs")
            self.assertTrue(mounted[0].endswith("/" + s.id))
            self.assertEqual(workspace_mounts(os.getpid(), workdir.path), [], "the mount reached the test's table")
        self.assertEqual(workspace_mounts(pid, workdir.path), [], "a destroyed session's tmpfs is unmounted")
        kept = client.session(profile="shell", keep=True)
        self.assertEqual(len(workspace_mounts(pid, workdir.path)), 1)
        self.assertEqual(kept.info.executing, 0)  # left live on purpose: the daemon's end must take it


if __name__ == "__main__":
    unittest.main()
