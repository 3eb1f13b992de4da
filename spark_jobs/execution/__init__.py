"""The Spark and Delta side: the Spark session factory, archive reading and quarantine (``sources``
and the ``archive_*`` modules behind it), numbering, running keys on the driver or the executors,
the Delta store, the replay (``replay``: the loop; ``ingest``, ``pass_compute``, ``pass_write``,
``maintenance``: its steps), recovery, the commands on top of them (``operations``), the Spark job
entry points (``jobs/``), the JVM code (``jvm/``) and the Spark Connect server the
``replay server`` command runs (``connect_server``).
"""
