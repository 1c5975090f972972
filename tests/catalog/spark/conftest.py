"""Every JVM the Spark tests start (the tests' sessions, the standalone master, worker and executors,
and the JVMs of the `dumpcat ... --spark` commands they run) compiles with the JIT's first tier only
and collects garbage on one thread: these JVMs live a few minutes over catalogs of a few thousand
rows, and the optimising compiler's threads took a third of their CPU on this 2-core machine
(68 s instead of 106 s for a session, `register_views` and every view collected once). What Java
computes does not depend on it (Java 17 evaluates floating point strictly at every tier)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def lean_jvm_env() -> dict[str, str]:
    """The environment that gives JVMs Spark starts JVM_OPTIONS: pyspark's (and so the driver's and
    the executors') and the standalone daemons'. A process whose JVM is already up keeps its own."""
    submit = f"--driver-java-options '{JVM_OPTIONS}' --conf 'spark.executor.extraJavaOptions={JVM_OPTIONS}'"
    return {"PYSPARK_SUBMIT_ARGS": f"{submit} pyspark-shell", "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS}


@pytest.fixture(scope="module", autouse=True)
def _lean_jvms() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for key, value in lean_jvm_env().items():
            mp.setenv(key, value)
        yield
