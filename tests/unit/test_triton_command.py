"""The embedded Triton's command says each single-valued flag once (a start line
that says ``--allow-metrics=true ... --allow-metrics=false`` leaves the reader guessing)."""

from __future__ import annotations

from emulator.triton.embedded import last_of_each_flag


def test_the_last_of_a_repeated_flag_stays_where_it_was() -> None:
    command = ["tritonserver", "--allow-grpc=false", "--allow-metrics=true", "--http-port=1",
               "--allow-metrics=false", "--backend-config=python,a=1",
               "--backend-config=python,b=2", "--allow-grpc=true", "--grpc-port=2"]
    assert last_of_each_flag(command) == [
        "tritonserver", "--http-port=1", "--allow-metrics=false", "--backend-config=python,a=1",
        "--backend-config=python,b=2", "--allow-grpc=true", "--grpc-port=2"]
