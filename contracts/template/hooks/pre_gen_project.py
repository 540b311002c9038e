"""Cookiecutter runs this before rendering: refuse answers that cannot be the package's or the class's name.

(`eosink new-connector` checks NAME more strictly before; this catches answers given at its prompts.)
"""

import keyword
import re
import sys

package, cls = "{{ cookiecutter.package_name }}", "{{ cookiecutter.class_name }}"
if not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", package) or keyword.iskeyword(package) or not cls.isidentifier():
    print(
        f"eosink new-connector: {package!r} cannot be the package name or {cls!r} the class name. "
        "Fix: use lowercase snake_case of at most 32 characters for the names, e.g. 'demo_sink'.",
        file=sys.stderr,
    )
    sys.exit(1)
