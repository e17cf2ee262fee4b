"""Stand-in for ansible-test's downloaded get-pip bootstrap (that download is unreachable here).

ansible-test runs this as ``__main__`` with pip's install arguments (``pip==<ver>``, options). It
bootstraps pip from the interpreter's bundled ``ensurepip``, then installs what was asked through the
package index pip is configured for.
"""

import ensurepip
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(
    subprocess.call([sys.executable, "-m", "pip", "install", "--cert", "/etc/ssl/certs/ca-certificates.crt", *args])
)
