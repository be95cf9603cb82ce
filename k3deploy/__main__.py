from k3deploy.cli.app import program

program()
