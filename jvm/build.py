#!/usr/bin/env python3
"""Build ``src/babelq/spark/jvm/babelq-spark.jar`` from the Java sources in ``jvm/src``.

Usage: ``.venv/bin/python jvm/build.py`` (needs ``javac`` 17+ and pyspark installed, whose
jars are the compile classpath). The jar is committed, so users and CI never need a JDK
compiler; ``tests/spark/test_jvm_jar.py`` fails when the sources changed and the jar was not
rebuilt (the manifest records a digest of the sources). The jar is written reproducibly:
sorted entries, fixed timestamps.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "jvm" / "src"
JAR = ROOT / "src" / "babelq" / "spark" / "jvm" / "babelq-spark.jar"
#: the jars the sources compile against (glob patterns inside pyspark's jars folder)
CLASSPATH = (
    "spark-sql-api_*.jar",
    "spark-catalyst_*.jar",
    "spark-unsafe_*.jar",
    "spark-common-utils_*.jar",
    "spark-common-utils-java_*.jar",
    "kryo-shaded-*.jar",
    "jackson-core-*.jar",
    "jackson-databind-*.jar",
    "jackson-annotations-*.jar",
    "scala-library-*.jar",
)
FIXED_TIME = (2026, 1, 1, 0, 0, 0)


def source_files() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def source_digest() -> str:
    """sha256 over the sources' relative paths and bytes (what the jar's manifest records)."""
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(path.relative_to(SOURCES).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def classpath() -> str:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = [str(p) for pattern in CLASSPATH for p in sorted(jars.glob(pattern))]
    if len(found) < len(CLASSPATH):
        sys.exit(f"build: missing compile jars under {jars}: want {CLASSPATH}, found {found}")
    return ":".join(found)


def javac_version() -> str:
    out = subprocess.run(["javac", "-version"], capture_output=True, text=True, check=True)
    return (out.stdout or out.stderr).strip()


def compile_classes(out_dir: Path) -> dict[str, bytes]:
    """Compile the sources into ``out_dir``; returns {jar entry name: class bytes}."""
    cmd = ["javac", "--release", "17", "-Xlint:all,-path", "-Werror", "-cp", classpath(), "-d", str(out_dir)]
    subprocess.run([*cmd, *map(str, source_files())], check=True)
    return {p.relative_to(out_dir).as_posix(): p.read_bytes() for p in sorted(out_dir.rglob("*.class"))}


def manifest() -> bytes:
    lines = [
        "Manifest-Version: 1.0",
        "Created-By: babelq jvm/build.py",
        f"Babelq-Source-Digest: {source_digest()}",
        f"Babelq-Javac: {javac_version()}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        classes = compile_classes(Path(tmp))
    JAR.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(JAR, "w", zipfile.ZIP_DEFLATED) as jar:
        for name, data in [("META-INF/MANIFEST.MF", manifest()), *sorted(classes.items())]:
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            jar.writestr(info, data)
    print(f"wrote {JAR.relative_to(ROOT)} ({JAR.stat().st_size} bytes, {len(classes)} classes)")


if __name__ == "__main__":
    main()
