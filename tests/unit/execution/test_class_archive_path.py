"""Which class-data archive a driver uses: named after the JVM spark-submit starts and Spark."""

from __future__ import annotations

import os

from spark_jobs.execution.spark_session import class_archive_path


def _fake_java(folder) -> str:
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    return str(java)


def test_the_archive_follows_java_home_and_the_java_binary(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    on_path = class_archive_path()
    java = _fake_java(tmp_path / "jdk")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with_home = class_archive_path()
    assert with_home != on_path  # spark-submit would start $JAVA_HOME/bin/java
    assert with_home.parent == on_path.parent and with_home.suffix == ".jsa"
    os.utime(java, ns=(0, 1_000_000_000))  # the JDK was upgraded in place
    assert class_archive_path() != with_home



def test_the_archive_follows_where_pysparks_jars_are(tmp_path, monkeypatch):
    """A project moved or copied with its .cache: the JVM refuses an archive made with another
    class path, so set-up must see that it has none for this one."""
    import pyspark

    here = class_archive_path()
    moved = tmp_path / "elsewhere" / "pyspark"
    moved.mkdir(parents=True)
    monkeypatch.setattr(pyspark, "__file__", str(moved / "__init__.py"))
    assert class_archive_path() != here
    assert class_archive_path().parent == here.parent
