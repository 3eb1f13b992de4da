"""The Spark and Delta side: the Spark session factory, archive reading and quarantine, numbering,
running keys on the driver or the executors, the Delta store, the replay, recovery, the commands on
top of them (``operations``), the Spark job entry points (``jobs/``) and the JVM code (``jvm/``).
"""
