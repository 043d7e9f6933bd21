[ TransferUrl = "osdf:///a"; TransferSuccess = false; DeveloperData = [ PerchVia = "perchd" ]; TransferErrorData = { [ Retryable = -1 ], [ ErrorType = "Contact" ] } ]
