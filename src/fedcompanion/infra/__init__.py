"""The infrastructure every other folder stands on, and which imports nothing of the package's: atomic writes and
verified reads (:mod:`.atomic`), child processes (:mod:`.processes`), the machine's threads and numerical platform
(:mod:`.machine`), memory (:mod:`.memory`), logs (:mod:`.logs`), and the fingerprint of the code a run executes
(:mod:`.fingerprint`, over the definition graphs of :mod:`.definitions`)."""
