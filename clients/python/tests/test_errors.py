"""No daemon: every error code docs/protocol.md documents has its own
exception class, and replies are read as the protocol writes them."""
from __future__ import annotations

import base64
import os
import re
import unittest

import cubicle
from cubicle.results import ExecStatus, RunResult
from cubicle.rpc import result_of

PROTOCOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs", "protocol.md")


def documented_codes() -> list:
    """The codes of the "Error codes" table."""
    with open(PROTOCOL) as f:
        text = f.read()
    table = text.split("## Error codes", 1)[1].split("\n## ", 1)[0]
    return [int(m) for m in re.findall(r"^\| (-32\d{3}) \|", table, re.MULTILINE)]


class ErrorCodesTest(unittest.TestCase):
    def test_each_documented_code_has_its_own_class(self) -> None:
        codes = documented_codes()
        self.assertGreaterEqual(len(codes), 10, "the table was not found")
        classes = set()
        for code in codes:
            with self.subTest(code=code):
                e = cubicle.RpcError.from_error({"code": code, "message": "m", "data": {"k": code}})
                self.assertIsNot(type(e), cubicle.RpcError)
                self.assertEqual((e.code, e.message, e.data), (code, "m", {"k": code}))
                self.assertEqual(type(e).code, code)
                classes.add(type(e))
                self.assertIn(type(e).__name__, cubicle.__all__)
        self.assertEqual(len(classes), len(codes))

    def test_other_codes_and_malformed_errors_stay_rpc_errors(self) -> None:
        self.assertIs(type(cubicle.RpcError.from_error({"code": 12, "message": "x"})), cubicle.RpcError)
        self.assertEqual(cubicle.RpcError.from_error("oops").code, -32603)

    def test_a_reply_without_result_or_error_is_a_transport_error(self) -> None:
        with self.assertRaises(cubicle.TransportError):
            result_of({"jsonrpc": "2.0", "id": 1})
        with self.assertRaises(cubicle.BusyError):
            result_of({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "busy"}})
        self.assertIsNone(result_of({"jsonrpc": "2.0", "id": 1, "result": None}))


class ResultsTest(unittest.TestCase):
    def test_output_is_read_from_text_or_base64(self) -> None:
        raw = {"reason": "exited", "exit_code": 0, "status": 0, "stdout": "h\u00e9\n",
               "stderr_base64": base64.b64encode(b"\xff\x00").decode(), "stdout_bytes": 4, "stderr_bytes": 2}
        r = RunResult.from_json(raw)
        self.assertEqual((r.stdout, r.stdout_data), ("h\u00e9\n", "h\u00e9\n".encode()))
        self.assertEqual(r.stderr_data, b"\xff\x00")
        self.assertTrue(r.ok)
        self.assertIs(r.raw, raw)

    def test_an_execution_that_failed_as_a_request_has_an_error_not_a_result(self) -> None:
        status = ExecStatus.from_json({"exec_id": "e1", "state": "done",
                                       "result": {"error": {"code": -32004, "message": "no profile"}}})
        self.assertIsNone(status.result)
        self.assertEqual(status.error["code"], -32004)
        self.assertTrue(status.ended)


if __name__ == "__main__":
    unittest.main()
