"""The Ray Serve driver's start-up rules, without Ray: a port taken under the proxy is picked again."""

from __future__ import annotations

from typing import Any

from mlsysopt.serving.rayserve_driver import _first, _start_serve


class _Serve:
    """Stands in for ``ray.serve``: the first ``fail`` starts find their port taken, as Ray's proxy reports it."""

    def __init__(self, fail: int) -> None:
        self.fail, self.ports, self.shutdowns = fail, [], 0

    def start(self, http_options: dict[str, Any], proxy_location: str) -> None:
        self.ports.append(http_options["port"])
        if len(self.ports) <= self.fail:
            raise RuntimeError(
                '\x1b[36mray::ProxyActor.ready()\x1b[39m (pid=1, ip=127.0.0.1)\n  File "proxy.py", line 1\n'
                f"RuntimeError: Failed to bind to address '127.0.0.1:{http_options['port']}'."
            )

    def shutdown(self) -> None:
        self.shutdowns += 1


def test_a_port_taken_before_the_proxy_binds_is_picked_again_when_mlsysopt_chose_it() -> None:
    serve = _Serve(fail=1)
    port = _start_serve(serve, None)
    assert port == serve.ports[1] != serve.ports[0] and serve.shutdowns == 1


def test_a_port_the_user_named_is_not_replaced_and_the_reason_is_the_remote_line() -> None:
    serve = _Serve(fail=1)
    why = _start_serve(serve, 23456)
    assert (
        why == "Ray Serve did not start on 127.0.0.1:23456 (RuntimeError: Failed to bind to address '127.0.0.1:23456'.)"
    )
    assert serve.ports == [23456]


def test_three_taken_ports_in_a_row_give_up_with_one_line() -> None:
    why = _start_serve(_Serve(fail=5), None)
    assert isinstance(why, str) and why.count("\n") == 0 and "Failed to bind" in why


def test_a_plain_exception_is_its_type_and_first_line() -> None:
    assert _first(ValueError("bad\nmore")) == "ValueError: bad"
