"""The benchmarks: scripts run by hand (``python benchmarks/<name>.py``, see benchmarks/README.md) and a
package the tests import (``from benchmarks import search_efficiency``). Never imported by the product."""
