"""{{ cookiecutter.description|wordwrap(110) }}"""

from {{ cookiecutter.package_name }}.config import {{ cookiecutter.class_name }}Config
from {{ cookiecutter.package_name }}.sink import (
    {{ cookiecutter.class_name }},
    read_rows,
)

__all__ = [
    "{{ cookiecutter.class_name }}",
    "{{ cookiecutter.class_name }}Config",
    "read_rows",
]
